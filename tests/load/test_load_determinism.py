"""The same workspace, loaded in fresh processes with different ``PYTHONHASHSEED``s, gives the same
targets, attributes (``query --output json``) and versions (the output paths of ``marinbuild -n``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

SEEDS = ("0", "1", "2", "12345")

FILES = {
    "steps.py": """
        def run(config):
            pass

        def join(config):
            pass
    """,
    "lib/defs.star": """
        SIZES = {"small": 1, "large": 3, "medium": 2}
        NAMES = ["c", "a", "b"]

        def describe(fn):
            return str(fn) + "/" + str(len) + "/" + repr(struct(f = fn, n = NAMES))

        def configs():
            out = {}
            for name in NAMES:
                for size, n in SIZES.items():
                    out[name + "_" + size] = {"n": n, "keys": [k for k in SIZES], "sorted": sorted(SIZES.keys())}
            return out
    """,
    "a/BUILD.marin": """
        load("@marinbuild//rules:python.py", "python_step")
        load("//lib:defs.star", "configs", "describe", "NAMES")

        def helper():
            return 1

        for name, config in configs().items():
            python_step(
                name = name,
                fn = "steps:run",
                config = config | {"described": describe(helper), "dict_keys": list({"z": 1, "y": 2, "x": 3})},
            )

        python_step(name = "all", fn = "steps:join", deps = [":" + n + "_small" for n in NAMES])
    """,
    "b/BUILD.marin": """
        load("@marinbuild//rules:python.py", "python_step")
        python_step(name = "victim", fn = "steps:run", deps = ["//a:all"], config = {"tpu": tpu("v4-8")})
    """,
}


def _run(ws: Path, seed: str, *args: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_targets_attributes_and_versions_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for rel, text in FILES.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    (ws / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.marinbuild]\n")
    queries = {seed: _run(ws, seed, "query", "//...", "--output", "json") for seed in SEEDS}
    plans = {seed: _run(ws, seed, "-n", "//...") for seed in SEEDS}
    assert len(set(queries.values())) == 1, queries
    assert len(set(plans.values())) == 1, plans
    assert '"//a:c_small"' in queries["0"] and "a/BUILD.marin.helper" in queries["0"]  # a function's name, no address
    # the target of one package gets the same version whether loaded alone or with everything
    alone = {seed: _run(ws, seed, "-n", "//b:victim") for seed in SEEDS}
    assert len(set(alone.values())) == 1
    path = re.compile(r"/b/victim-[0-9a-f]+")
    assert path.findall(alone["0"]) and path.findall(alone["0"])[-1] == path.findall(plans["0"])[-1]
