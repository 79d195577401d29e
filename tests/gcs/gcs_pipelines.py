"""Steps that read and write ``gs://`` outputs, a seeder of built steps, and a subprocess entry point.

``python gcs_pipelines.py PREFIX MODE [ARG]`` builds in a new process (the emulator comes from
``STORAGE_EMULATOR_HOST``): ``race`` (one slow step), ``hang`` (a step that never returns),
``graph TAG`` (a shared root and a TAG-specific leaf), ``wide N`` (a root, N-2 steps on it, a sink on those).
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines import CALLS, record_call  # noqa: F401 - one call log (gp.CALLS) for local and GCS pipelines

from marinbuild.executor import Executor, ExecutorStep, output_path_of, this_output_path, versioned
from marinbuild.store import fs


@dataclass(frozen=True)
class GsConfig:
    output_path: Any
    text: Any = "x"
    inputs: Any = field(default_factory=list)
    sleep: Any = 0.0
    extra_files: Any = 0


def write_gs(config: GsConfig) -> dict:
    """out.txt = the inputs' out.txt and ``text`` joined by '+'; plus ``extra_files`` part files."""
    record_call(config.output_path)
    if config.sleep:
        time.sleep(config.sleep)
    parts = []
    for path in config.inputs:
        data = fs.read_bytes(fs.join(path, "out.txt"))
        assert data is not None, f"input {path} has no out.txt"
        parts.append(data.decode())
    parts.append(str(config.text))
    fs.write_atomic(fs.join(config.output_path, "out.txt"), "+".join(parts).encode())
    for i in range(config.extra_files):
        fs.write_atomic(fs.join(config.output_path, f"parts/part-{i}.txt"), f"{config.text}-{i}\n".encode() * 50)
    return {"text": "+".join(parts)}


def hang(config: GsConfig) -> None:
    fs.write_atomic(fs.join(config.output_path, "partial.txt"), b"half")
    print("STARTED", flush=True)
    time.sleep(600)


def step(
    name: str,
    text: str = "x",
    inputs: list[ExecutorStep] | None = None,
    fn: Any = write_gs,
    sleep: float = 0.0,
    extra_files: int = 0,
) -> ExecutorStep:
    return ExecutorStep(
        name=name,
        fn=fn,
        config=GsConfig(
            output_path=this_output_path(),
            text=versioned(text),
            inputs=[output_path_of(s) for s in inputs or []],
            sleep=sleep,
            extra_files=extra_files,
        ),
    )


def new_bucket() -> str:
    """A fresh bucket on the current GCS endpoint; its name."""
    import uuid

    from marinbuild.store import gcs

    name = f"mb-{uuid.uuid4().hex[:12]}"
    gcs.filesystem().mkdir(name)
    return name


def executor(prefix: str, **kwargs: Any) -> Executor:
    kwargs.setdefault("listeners", [])
    return Executor(prefix=prefix, executor_info_base_path=prefix + "/experiments", **kwargs)


def built_files(ex: Executor, steps: list[ExecutorStep], minimal: bool = False) -> dict[str, bytes]:
    """The files a commit leaves for each of ``steps`` (out.txt, the action record with its manifest, status), by URL.
    ``minimal``: the status and the action record only."""
    import xxhash

    from marinbuild.store import action_cache
    from marinbuild.store.manifest import FileEntry, Manifest

    files: dict[str, bytes] = {}
    for s in steps:
        ex.compute_version(s)
        out = ex.output_paths[s]
        data = f"seeded {s.name}".encode()
        manifest = Manifest([FileEntry("out.txt", len(data), xxhash.xxh3_128_hexdigest(data))], time.time())
        key = action_cache.ActionKey.of(ex.version_strs[s], s.name)
        if not minimal:
            files[out + "/out.txt"] = data
        files[action_cache.record_path(out, key.digest)] = action_cache.new_record(out, key, manifest, "seed").encode()
        files[out + "/.executor_status"] = b"SUCCESS"
    return files


def seed_built(ex: Executor, steps: list[ExecutorStep], minimal: bool = True) -> None:
    """Make ``steps`` look built (see ``built_files``) by uploading their files."""
    from marinbuild.store import gcs

    filesystem = gcs.filesystem()
    for url, data in built_files(ex, steps, minimal).items():
        filesystem.pipe_file(url, data)


BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "gcs_steps:write", config = {"text": "A"})
python_step(name = "b", fn = "gcs_steps:write", config = {"text": "B"}, deps = [":a"])
python_step(name = "other", fn = "gcs_steps:write", config = {"text": "O"})
"""

STEPS_PY = """
import os
from marinbuild.store import fs


def write(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["output_path"] + "\\n")
    parts = [fs.read_bytes(dep + "/out.txt").decode() for dep in config["deps"]] + [config["text"]]
    fs.write_atomic(config["output_path"] + "/out.txt", "+".join(parts).encode())
"""


def workspace(root: Path) -> Path:
    """A workspace with //pipe:a, //pipe:b (needs a) and //pipe:other, python steps writing through fsspec."""
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "gcs_steps.py").write_text(STEPS_PY)  # not "steps": other tests import theirs in-process
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    return root


if __name__ == "__main__":
    prefix, mode = sys.argv[1], sys.argv[2]
    # A short stale_after only where a dead runner must be taken over quickly; racing runners on a
    # loaded machine must not mistake a live runner for a dead one.
    ex = executor(prefix, heartbeat_interval=0.2, stale_after=2.0 if mode == "hang" else 30.0)
    if mode == "race":
        ex.run([step("race/one", "r", sleep=0.5)])
    elif mode == "hang":
        ex.run([step("victim", "v", fn=hang)])
    elif mode == "graph":
        root = step("shared/root", "root", sleep=0.3)
        ex.run([step(f"shared/leaf-{sys.argv[3]}", sys.argv[3], inputs=[root])])
    elif mode == "wide":
        root = step("wide/root", "root")
        middle = [step(f"wide/m{i}", f"m{i}", inputs=[root]) for i in range(int(sys.argv[3]) - 2)]
        ex.run([step("wide/sink", "sink", inputs=middle)])
    print(json.dumps({"ok": True, "ran": len(ex.outcome.ran) if ex.outcome else 0}), flush=True)
