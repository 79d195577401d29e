"""``import marinbuild`` and the CLI's startup import no part of the server: Starlette and uvicorn load only
for ``serve``."""

from __future__ import annotations

import subprocess
import sys

SERVER_MODULES = (
    "starlette",
    "uvicorn",
    "jinja2",
    "marinbuild.serve.app",
    "marinbuild.serve.main",
    "marinbuild.serve.model",
)


def test_importing_marinbuild_and_starting_the_cli_import_no_server() -> None:
    code = (
        "import sys, marinbuild, marinbuild.executor, marinbuild.cli\n"
        "try:\n    marinbuild.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "marinbuild.cli.main(['serve', '--help'])\n"
        f"print(sorted(m for m in {SERVER_MODULES!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_get_experiment_url_imports_no_server() -> None:
    code = (
        "import sys\nfrom marinbuild.executor import Executor\n"
        "e = Executor(prefix='/p', executor_info_base_path='/p/experiments')\n"
        "e.executor_info_path = '/p/experiments/x.json'\ne.get_experiment_url()\n"
        f"print(sorted(m for m in {SERVER_MODULES!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
