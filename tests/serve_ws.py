"""The workspace the serve tests look at, built through the real CLI, and a real server over it.

``build_workspace(root)`` writes and builds (``marinbuild -k`` in a subprocess) a workspace whose graph
has every state the graph page shows:

- ``//pipe:a`` -> ``//pipe:b``: built; ``//pipe:bad`` failed and ``//pipe:after_bad`` dependency failed;
- ``//pipe:never``: missing (never asked for); ``//pipe:changed``: stale (built, then its config edited);
- ``//train:lr_small``, ``//train:lr_big``: two outputs shaped like ``train_lm``'s (a workspace rule
  writing ``metrics.jsonl`` with training and validation losses, ``summary.json``, and the
  ``model``/``optimizer``/``trainer`` attributes the report's key settings read);
- ``//evil:script``: a Marin script whose step name and config carry HTML (``<script>``, ``<img onerror=...>``);
- ``//live:slow``: waits for the file ``$SERVE_RELEASE`` before it finishes (the live tests start it).

``Server`` runs ``marinbuild serve --port 0`` in a subprocess and reads its URL from the line it prints.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from interrupt import default_sigint
from workspaces import write_workspace

STEPS = """
import json
import os
import time


def write(config):
    os.makedirs(os.path.join(config["output_path"], "logs"), exist_ok=True)
    with open(os.path.join(config["output_path"], "logs", "run.log"), "w") as f:
        f.writelines(f"line {i} of the log\\n" for i in range(3000))
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(json.dumps(config["config"]) if "config" in config else "written")


def fail(config):
    raise RuntimeError("the bad step fails on purpose")


def wait_for_release(config):
    release = os.environ["SERVE_RELEASE"]
    while not os.path.exists(release):
        time.sleep(0.05)
    os.makedirs(config["output_path"], exist_ok=True)
"""

TOY_TRAIN = '''
"""A rule writing what train_lm writes for the pages: metrics.jsonl and summary.json (no model is trained)."""
import json
import math
import os

from marinbuild.load import attr, rule


def _impl(ctx):
    lr = ctx.attr.optimizer["learning_rate"]
    steps = ctx.attr.trainer["num_train_steps"]
    os.makedirs(ctx.output_path, exist_ok=True)
    with open(os.path.join(ctx.output_path, "metrics.jsonl"), "w") as f:
        for step in range(0, steps + 1, 10):
            record = {"step": step, "train/loss": 2.0 + 6.0 * math.exp(-lr * step * 3)}
            if step % 20 == 0:
                record["eval/loss"] = record["train/loss"] + 0.25
            f.write(json.dumps(record) + "\\n")
    with open(os.path.join(ctx.output_path, "summary.json"), "w") as f:
        json.dump({"parameter_count": 1234567, "steps": steps}, f)


toy_train = rule(
    implementation=_impl,
    attrs={"model": attr.dict(), "optimizer": attr.dict(), "trainer": attr.dict()},
    doc="train_lm-shaped outputs for the serve tests",
)
'''

EVIL_SCRIPT = """
import os
from dataclasses import dataclass

from marinbuild.executor import ExecutorStep, this_output_path, versioned

EVIL = "<script>window.pwned=1</script><img src=x onerror=window.pwned=1>"


@dataclass(frozen=True)
class C:
    output_path: str
    note: str


def touch(config):
    os.makedirs(config.output_path, exist_ok=True)


evil = ExecutorStep(name="evil/" + EVIL, fn=touch, config=C(output_path=this_output_path(),
                                                           note=versioned("<script>window.pwned=2</script>")))
"""

PIPE = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "steps:write", config = {"v": 1})
python_step(name = "b", fn = "steps:write", config = {"v": 1}, deps = [":a"])
python_step(name = "bad", fn = "steps:fail", config = {})
python_step(name = "after_bad", fn = "steps:write", config = {}, deps = [":bad"])
python_step(name = "never", fn = "steps:write", config = {"v": 1})
python_step(name = "changed", fn = "steps:write", config = {"v": VERSION})
"""

TRAIN = """
load("//rules:toytrain.py", "toy_train")

toy_train(name = "lr_small", model = {"type": "llama", "hidden_dim": 64, "num_layers": 2},
          optimizer = {"learning_rate": 0.001}, trainer = {"batch_size": 8, "num_train_steps": 200})
toy_train(name = "lr_big", model = {"type": "llama", "hidden_dim": 64, "num_layers": 2},
          optimizer = {"learning_rate": 0.01}, trainer = {"batch_size": 8, "num_train_steps": 200})
"""

BUILT = [
    "//pipe:a",
    "//pipe:b",
    "//pipe:bad",
    "//pipe:after_bad",
    "//pipe:changed",
    "//train:lr_small",
    "//train:lr_big",
    "//evil:script",
]


def mb(ws: Path, *args: str, release: Path | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``marinbuild ARGS`` in ``ws`` (the worktree's code; no $MARIN_PREFIX, no serve URL from the test's env)."""
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args],
        cwd=ws,
        env=env_for(ws, release),
        capture_output=True,
        text=True,
        timeout=180,
        **kwargs,
    )


def env_for(ws: Path, release: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARINBUILD_SERVE_URL")}
    env["SERVE_RELEASE"] = str(release or ws.parent / "release")
    return env


def build_workspace(root: Path) -> Path:
    ws = write_workspace(
        root,
        {
            "steps.py": STEPS,
            "rules/toytrain.py": TOY_TRAIN,
            "rules/BUILD.marin": "",
            "pipe/BUILD.marin": PIPE.replace("VERSION", "1"),
            "train/BUILD.marin": TRAIN,
            "evil/script.py": EVIL_SCRIPT,
            "evil/BUILD.marin": 'load("@marinbuild//rules:python.py", "executor_script")\n'
            'executor_script(name = "script", script = "script.py")\n',
            "live/BUILD.marin": 'load("@marinbuild//rules:python.py", "python_step")\n'
            'python_step(name = "slow", fn = "steps:wait_for_release", config = {})\n',
        },
    )
    proc = mb(ws, "-k", *BUILT)
    assert proc.returncode == 1, proc.stderr  # //pipe:bad fails on purpose
    (ws / "pipe/BUILD.marin").write_text(PIPE.replace("VERSION", "2"))  # //pipe:changed is now stale
    return ws


class Server:
    """``marinbuild serve ARGS`` in a subprocess; ``url`` once it listens. Stop with ``stop()``."""

    def __init__(self, ws: Path, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "marinbuild", "serve", "--port", "0", *args],
            cwd=ws,
            env=env_for(ws),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            preexec_fn=default_sigint,  # a test stops it with Ctrl-C
        )
        self.lines: list[str] = []
        try:
            self.url = self._started()
        except BaseException:
            self.stop()  # no server left behind by a test that failed here
            raise
        parsed = urllib.parse.urlsplit(self.url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80

    def _started(self) -> str:
        """The URL from the line serve prints once it listens (the lines before it are kept in ``lines``)."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if line.startswith("marinbuild: serving"):
                return line.split(" at ", 1)[1].split()[0].rstrip("/")
        raise AssertionError(f"serve did not start: {''.join(self.lines)}")

    def get(
        self, path: str, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        """The status, headers and body of ``path`` sent exactly as written (no normalisation of ``..``)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def json(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, (status, body)
        return json.loads(body)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


EVIL_NAME = "evil/<script>window.pwned=1</script><img src=x onerror=window.pwned=1>"
"""The name of ``//evil:script``'s step."""
