"""What the ML steps' helper processes print: the lines that matter on the build's stderr, the rest in the log."""

from __future__ import annotations

import os

import pytest

from marinbuild.ml.process import MlProcessError, run_child

CHILD = """
from marinbuild.ml.process import child_main, say


def run(payload):
    say("working")
    # what zephyr's coordinator logs (levanter's cache builder) before its local workers first report in
    print("W20261126 14:32:21 139722181564096 zephyr.execution All workers are dead/failed. "
          "Waiting for workers to recover...", flush=True)
    print("All workers are dead/failed. Waiting for workers to recover...", flush=True)
    # what an eval_harness run prints on success: the datasets library's and tqdm's progress, levanter's note
    print("Generating test split: 20 examples [00:00, 2087.76 examples/s]", flush=True)
    print(" 85%|########5 | 17/20 [00:00<00:00, 154.91it/s]", flush=True)
    print("W20261126 18:00:26 140628010593152 levanter.eval_harness Skipping non-numeric metric "
          "name='story_object_0shot' for task story_object_0shot", flush=True)
    return {"ok": True}


if __name__ == "__main__":
    child_main(run)
"""


def _run(tmp_path, monkeypatch, verbose: bool) -> str:
    (tmp_path / "noisy_child.py").write_text(CHILD)
    monkeypatch.delenv("MARINBUILD_ML_LOG", raising=False)
    if verbose:
        monkeypatch.setenv("MARINBUILD_VERBOSE", "1")
    else:
        monkeypatch.delenv("MARINBUILD_VERBOSE", raising=False)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    assert run_child("noisy_child", {}, log_dir=str(tmp_path / "logs"), name="noisy", env={"PYTHONPATH": path}) == {
        "ok": True
    }
    return (tmp_path / "logs" / "noisy.log").read_text()


def test_zephyrs_waiting_for_workers_stays_in_the_log(tmp_path, monkeypatch, capsys):
    log = _run(tmp_path, monkeypatch, verbose=False)
    err = capsys.readouterr().err
    assert "[marinbuild.ml] working" in err
    assert "All workers are dead" not in err
    assert log.count("All workers are dead") == 2


def test_verbose_forwards_every_line(tmp_path, monkeypatch, capsys):
    _run(tmp_path, monkeypatch, verbose=True)
    assert capsys.readouterr().err.count("All workers are dead") == 2


def test_lm_evals_progress_stays_in_the_log(tmp_path, monkeypatch, capsys):
    log = _run(tmp_path, monkeypatch, verbose=False)
    err = capsys.readouterr().err
    for line in ("Generating test split", "17/20 [00:00", "Skipping non-numeric metric"):
        assert line not in err and line in log


FAILING_CHILD = """
import atexit
import threading

from marinbuild.ml.process import child_main


def run(payload):
    atexit.register(threading.Event().wait)  # as jax.distributed's shutdown barrier waits for hosts that are gone
    raise ValueError("bad configuration found at run time")


if __name__ == "__main__":
    child_main(run)
"""


@pytest.mark.timeout(60)
def test_a_failing_child_ends_at_once_with_its_traceback_without_exit_handlers(tmp_path):
    (tmp_path / "failing_child.py").write_text(FAILING_CHILD)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    with pytest.raises(MlProcessError) as failed:
        run_child("failing_child", {}, log_dir=str(tmp_path / "logs"), name="failing", env={"PYTHONPATH": path})
    assert failed.value.returncode == 1
    assert "ValueError: bad configuration found at run time" in str(failed.value)


CRASHING_TEARDOWN = """
import atexit
import os

from marinbuild.ml.process import child_main


def run(payload):
    atexit.register(os.abort)  # as a native thread crashing the interpreter's teardown does
    return {"trained": True}


if __name__ == "__main__":
    child_main(run)
"""


def test_a_child_that_wrote_its_result_succeeded_even_if_its_teardown_crashed(tmp_path, capsys):
    (tmp_path / "crashing_child.py").write_text(CRASHING_TEARDOWN)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": path}
    assert run_child("crashing_child", {}, log_dir=str(tmp_path / "logs"), name="crashing", env=env) == {
        "trained": True
    }
    assert "exited with code -6 after writing its result" in capsys.readouterr().err
