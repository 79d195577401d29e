"""The suite markers tests/conftest.py sets, as pytest's own collection sees them (in a child process).

One file of each slow folder and one of the fast set are collected once; each test's markers
are read off the collected items.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
QUICKSTART, GCS_STORE, RAY_AUTH, JSONENC = (
    "tests/ml/test_quickstart.py",
    "tests/gcs/test_gcs_store.py",
    "tests/ray/test_cluster_auth.py",
    "tests/test_jsonenc.py",
)
COLLECT = """
import json, sys
import pytest

class Markers:
    def __init__(self):
        self.by_file = {}

    def pytest_collection_finish(self, session):
        for item in session.items:
            names = {m.name for m in item.iter_markers()} & {"ray", "gcs", "ml"}
            self.by_file.setdefault(item.nodeid.split("::")[0], set()).update(names)

plugin = Markers()
code = pytest.main(["-p", "no:cacheprovider", "--collect-only", "-q", *sys.argv[1:]], plugins=[plugin])
print(json.dumps({f: sorted(n) for f, n in plugin.by_file.items()}))
sys.exit(code)
"""


def test_each_slow_folder_marks_its_tests():
    files = (QUICKSTART, GCS_STORE, RAY_AUTH, JSONENC)
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, *files], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    markers = json.loads(done.stdout.splitlines()[-1])
    assert markers == {
        QUICKSTART: ["ml"],
        GCS_STORE: ["gcs"],
        RAY_AUTH: ["ray"],
        JSONENC: [],
    }
