"""A workspace with one ``tokenize`` target over many small document files, and reading what it built.

Shared by the tokenize tests (local backend, tests/ml) and the Ray tests (tests/ray). The
documents are the quickstart's synthetic stories, split into gzipped JSON-lines files written
with a fixed gzip time (so a file's bytes, and its shard key, depend on its texts only); the
tokenizer is a small BPE trained on them (``toy_tokenizer``). Builds run the real CLI in a
child process with a build-event file. ``token_rows`` reads a levanter cache's rows back;
``reference_rows`` builds the same files with levanter's own single-process builder.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path
from typing import Any

from workspaces import Build, CliWorkspace

REPO = Path(__file__).resolve().parents[1]
QUICKSTART_DATA = REPO / "experiments" / "quickstart" / "data"


def stories() -> list[str]:
    from marinbuild.ml.corpus import iter_texts

    return list(iter_texts(sorted(str(p) for p in QUICKSTART_DATA.glob("train-*.jsonl.gz"))))


def toy_tokenizer(where: Path) -> Path:
    from marinbuild.ml.tokenizer import train_bpe_tokenizer

    if not (where / "tokenizer.json").exists():
        train_bpe_tokenizer(stories(), str(where), vocab_size=300)
    return where


def gz_bytes(lines: list[str]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write("".join(line + "\n" for line in lines).encode())
    return buf.getvalue()


def write_docs(path: Path, texts: list[str], text_key: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gz_bytes([json.dumps({text_key: t}) for t in texts]))
    return path


BUILD = """load("@marinbuild//rules:data.py", "raw_data")
load("@marinbuild//rules:tokenize.py", "tokenize")

raw_data(name = "docs", {docs})

tokenize(
    name = "tok",
    train = [":docs"],
    tokenizer_name = "{tokenizer}",
    workers = {workers},
    skip_bad_records = {skip},
    shard_bytes = {shard_bytes},
)
"""


class TokenizeWorkspace(CliWorkspace):
    """``pipe:docs`` (every ``pipe/data/*.jsonl.gz`` and ``*.jsonl``) tokenized by ``pipe:tok``, toy tokenizer.

    ``shard_bytes``: the target's (0 by default: a shard per file). ``in_place``: ``pipe:docs``
    names the files by a glob URL, read where they are when ``pipe:tok`` runs (a ``raw_data``
    of ``srcs`` copies them and reads each one to count its documents)."""

    def __init__(
        self,
        root: Path,
        tokenizer: Path,
        workers: int = 2,
        skip_bad_records: bool = False,
        in_place: bool = False,
        shard_bytes: int = 0,
    ):
        super().__init__(root, {"HF_HUB_OFFLINE": "1"})
        self.data = root / "pipe" / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        (root / "pyproject.toml").write_text('[project]\nname = "tok-test"\n\n[tool.marinbuild]\nprefix = "out"\n')
        self.tokenizer = tokenizer
        self.in_place = in_place
        self.shard_bytes = shard_bytes
        self.set_build(workers, skip_bad_records)

    def set_build(self, workers: int = 2, skip_bad_records: bool = False) -> None:
        docs = (
            f'urls = ["{self.data}/*.jsonl*"]' if self.in_place else 'srcs = glob(["data/*.jsonl", "data/*.jsonl.gz"])'
        )
        (self.root / "pipe" / "BUILD.marin").write_text(
            BUILD.format(
                docs=docs,
                tokenizer=self.tokenizer,
                workers=workers,
                skip=str(bool(skip_bad_records)),
                shard_bytes=self.shard_bytes,
            )
        )

    def build(self, *args: str, timeout: float = 600) -> Build:
        """``marinbuild //pipe:tok ARGS``."""
        return super().build("//pipe:tok", *args, timeout=timeout)

    def output(self) -> Path:
        """The newest built output of ``pipe:tok``."""
        built = [p for p in (self.root / "out" / "pipe").glob("tok-*") if (p / "tokenized.json").exists()]
        assert built, f"no built pipe:tok under {self.root / 'out'}"
        return max(built, key=lambda p: p.stat().st_mtime)

    @property
    def shard_store(self) -> Path:
        return self.root / "out" / "tokenize_shards"

    def committed_shards(self) -> set[str]:
        """Keys of the shards whose action record exists."""
        return {
            p.name[len(".marinbuild_action.") : -len(".json")]
            for p in self.shard_store.glob("*/*/.marinbuild_action.*.json")
        }


def shard_log(output: Path) -> list[dict[str, Any]]:
    path = output / "logs" / "shards.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def token_rows(cache_dir: str | Path) -> list[list[int]]:
    """Every row's ``input_ids`` of a levanter cache, in order."""
    import numpy as np
    from levanter.store.cache import TreeCache

    cache = TreeCache.load(str(cache_dir), {"input_ids": np.zeros((0,), dtype=np.int32)})
    n = len(cache.as_sync_dataset())
    return [list(map(int, row["input_ids"])) for row in cache.get_batch_sync(list(range(n)))] if n else []


def reference_rows(files: list[str], tokenizer: Path, out: Path, text_key: str = "text") -> list[list[int]]:
    """The rows levanter's own single-process builder writes for ``files`` (the way tokenize used to build)."""
    from levanter.data.sharded_datasource import UrlDataSource
    from levanter.data.text import TextLmDatasetFormat, build_lm_dataset_cache
    from levanter.store.cache import CacheOptions
    from levanter.tokenizers import load_tokenizer

    build_lm_dataset_cache(
        str(out),
        UrlDataSource(files, columns=[text_key]),
        TextLmDatasetFormat(text_key=text_key),
        load_tokenizer(str(tokenizer)),
        CacheOptions(batch_size=128),
        enforce_eos=True,
    )
    return token_rows(out)


def pool_workers(where: Path | str, parent: int | None = None) -> list[int]:
    """Local pool workers (``marinbuild.ml.local_workers``) living under the runtime folder ``where`` (their
    ``XDG_RUNTIME_DIR``), or the children of ``parent``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if b"local_workers" not in (proc / "cmdline").read_bytes():
                continue
            if parent is not None and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(proc.name))
            elif parent is None and f"XDG_RUNTIME_DIR={where}\0".encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def worker_sessions(output: Path) -> list[tuple[int, int]]:
    """(pid, session) of each pool worker that served the tokenize step of ``output``, by its worker log."""
    log = (output / "logs" / "tokenize-workers.log").read_text()
    return sorted((int(p), int(s)) for p, s in re.findall(r"pool worker (\d+): session (\d+)", log))
