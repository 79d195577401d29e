"""The output paths the docs show for the repository's own targets (``.../<package>/<name>-<hash>``) are the
ones the build makes: each ``<step name>-<hash>`` in README.md, docs/ and experiments/ whose step name is one of
the repository's steps must carry that step's hash, as ``marinbuild -n //...`` computes it now."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from workspaces import REPOSITORY, repository_workspace

OUTPUT_NAME = re.compile(r"([\w./-]+)-([0-9a-f]{6})\b")


def _documents() -> list[Path]:
    return [
        REPOSITORY / "README.md",
        *sorted((REPOSITORY / "docs").glob("*.md")),
        *sorted((REPOSITORY / "experiments").rglob("*.md")),
    ]


def _repository_hashes(root: Path) -> dict[str, str]:
    """Step name -> the hash of its output path, for every step of the repository's targets."""
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "-n", "//...", "--output", "json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    hashes = {}
    for row in json.loads(done.stdout)["plan"]:
        match = OUTPUT_NAME.fullmatch(os.path.basename(row["output_path"]))
        if match is not None:
            hashes[row["step"]] = match.group(2)
    return hashes


def test_the_docs_show_the_hashes_the_build_makes(tmp_path: Path) -> None:
    hashes = _repository_hashes(repository_workspace(tmp_path / "repo"))
    assert "experiments/tootsie/base_eval/mmlu_0shot" in hashes
    wrong, checked = [], 0
    for document in _documents():
        for number, line in enumerate(document.read_text().splitlines(), 1):
            for match in OUTPUT_NAME.finditer(line):
                shown, digest = match.groups()
                for step, expected in hashes.items():
                    if shown == step or shown.endswith("/" + step):
                        checked += 1
                        if digest != expected:
                            where = f"{document.relative_to(REPOSITORY)}:{number}"
                            wrong.append(f"{where}: {step}-{digest}, the build makes {step}-{expected}")
    assert checked, "no example hash of a repository step found in the docs"
    assert not wrong, "\n".join(wrong)
