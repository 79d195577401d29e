"""A failed step's ``.marinbuild_traceback.txt`` on a gs:// prefix (fake-gcs-server): written with FAILED, named by
the error, left out of the manifest, and gone once the step succeeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gcs_pipelines as gp
import pytest

from marinbuild.executor import ExecutorStep, StepFailedError, this_output_path, versioned
from marinbuild.store import fs, manifest
from marinbuild.store import status as st

TRACEBACK_FILE = ".marinbuild_traceback.txt"


@dataclass(frozen=True)
class FlakyConfig:
    output_path: Any
    text: Any
    fixed: Any = False
    """Not versioned: the same step, at the same path, fails or succeeds."""


def flaky(config: FlakyConfig) -> None:
    settings = {"text": config.text}
    if config.fixed:
        settings["missing_key"] = "now set"
    write_setting(settings, config.output_path)


def write_setting(settings: dict, output_path: str) -> None:
    fs.write_atomic(fs.join(output_path, "setting.txt"), settings["missing_key"].encode())


def step(fixed: bool) -> ExecutorStep:
    return ExecutorStep(
        name="tb/flaky", fn=flaky, config=FlakyConfig(output_path=this_output_path(), text=versioned("t"), fixed=fixed)
    )


def test_traceback_file_on_gcs_is_written_with_failed_and_removed_on_success(gs_prefix):
    failing, broken = gp.executor(gs_prefix), step(fixed=False)
    with pytest.raises(StepFailedError) as info:
        failing.run([broken])
    out = failing.output_paths[broken]
    assert out.startswith("gs://")
    url = fs.join(out, TRACEBACK_FILE)
    assert st.read_status(out) == st.STATUS_FAILED
    data = fs.read_bytes(url)
    assert data is not None
    text = data.decode()
    assert "in write_setting" in text and text.rstrip().endswith("KeyError: 'missing_key'")
    assert f"traceback: {url}" in str(info.value)

    repaired = step(fixed=True)
    assert gp.executor(gs_prefix).run([repaired])[repaired] == out
    assert st.read_status(out) == st.STATUS_SUCCESS
    assert fs.read_bytes(url) is None  # a SUCCESS output carries no stale traceback
    assert [f.path for f in manifest.read_manifest(out).files] == ["setting.txt"]
