"""``initialize_from = checkpoint(":phase1", step = N)`` in a BUILD file: what it loads to, and its load errors.

Each error is one line at the BUILD file's ``path:line:col``, exit 2, before anything is written. The
version is Marin's ``phase1.cd("checkpoints/step-N").nonblocking()`` (``tests/compat``: ``checkpoint_handoffs``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from workspaces import assert_one_line_load_error, write_workspace

PHASES = """
load("@marinbuild//rules:tokenize.py", "tokenize")
load("@marinbuild//rules:train.py", "train_lm")

tokenize(name = "tok", train = [], tokenizer_name = "gpt2")
train_lm(name = "phase1", data = {{":tok": 1.0}}, model = {{}}, trainer = {{}})
train_lm(
    name = "phase2",
    data = {{":tok": 1.0}},
    model = {{}},
    trainer = {{}},
    initialize_from = {value},
)
"""


@pytest.mark.parametrize(
    ("value", "where", "message"),
    [
        (
            '":phase1"',
            "12:5",
            """'initialize_from' of train_lm(name='phase2'): expected checkpoint(":target", step = N)""",
        ),
        (
            'checkpoint(":phase1", step = -1)',
            "12:5",
            "checkpoint(): step must be an int >= 0 (N of checkpoints/step-N)",
        ),
        ('checkpoint(":phase1", step = "20")', "12:5", "checkpoint(): step must be an int >= 0"),
        ('checkpoint(":nope", step = 20)', "12:5", "no such target '//pipe:nope'"),
        ('checkpoint(":phase2", step = 20)', "7:1", "dependency cycle: //pipe:phase2 -> //pipe:phase2"),
        ('checkpoint(":phase1")', "12:23", "checkpoint() missing 1 required positional argument: 'step'"),
        ('checkpoint(":notes.txt", step = 20)', "7:1", "checkpoint() takes a target, //pipe:notes.txt is a file"),
    ],
)
def test_checkpoint_errors_are_one_located_line(tmp_path, value, where, message):
    files = {"pipe/BUILD.marin": PHASES.format(value=value), "pipe/notes.txt": "x"}
    root = write_workspace(tmp_path / "ws", files)
    assert_one_line_load_error(root, "//pipe:phase2", f"pipe/BUILD.marin:{where}", message)


def test_checkpoint_is_versioned_as_marins_nonblocking_cd(tmp_path):
    """The consumer's version holds ``DEP[i]/checkpoints/step-N`` and the producer as a pseudo-dependency; the plan
    of a consumer whose checkpoint is not there yet runs the producer too, and its JSON row names the checkpoint."""
    from marinbuild.analysis.session import Session

    root = write_workspace(
        tmp_path / "ws", {"pipe/BUILD.marin": PHASES.format(value='checkpoint(":phase1", step = 20)')}
    )
    session = Session.open(root)
    (label,) = session.load(["//pipe:phase2"])
    session.analyse([label])
    engine = session.engine
    (consumer,) = session.steps_of(label)
    engine.add(consumer)
    version = engine.versions[consumer]
    assert version["config"]["attrs.initialize_from"] == "DEP[1]/checkpoints/step-20"  # DEP[0]: the data
    assert [d["name"] for d in version["dependencies"]] == ["pipe/tok"]
    assert [d["name"] for d in version["pseudo_dependencies"]] == ["pipe/phase1"]

    plan = subprocess.run(
        [sys.executable, "-m", "marinbuild", "-n", "//pipe:phase2", "--output", "json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plan.returncode == 0, plan.stderr
    rows = {row["step"]: row for row in json.loads(plan.stdout)["plan"]}
    assert {step: row["state"] for step, row in rows.items()} == dict.fromkeys(rows, "missing")
    assert set(rows) == {"pipe/tok", "pipe/phase1", "pipe/phase2"}
    # the hand-off, as the text plan's "from: checkpoint step-20 of pipe/phase1"
    checkpoint = rows["pipe/phase1"]["output_path"] + "/checkpoints/step-20"
    assert rows["pipe/phase2"]["from"] == [{"checkpoint": checkpoint, "step": 20, "of": "pipe/phase1"}]
    assert rows["pipe/phase1"]["from"] == [] and rows["pipe/tok"]["from"] == []
