"""One resolution of the settings for both faces (``marinbuild.engine.settings``): the command line's session and
a Marin script's ``Executor`` get the same prefix, run-info folder and backend from the same inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from marinbuild.analysis.session import Session
from marinbuild.engine.settings import Settings, SettingsError
from marinbuild.executor import Executor, compute_output_path, executor_main


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("MARIN_PREFIX", "MARINBUILD_BACKEND", "RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.marinbuild]\nprefix = "out"\nbackend = "local"\njobs = 3\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    return tmp_path


def test_both_faces_resolve_the_workspace_prefix_alike(ws: Path) -> None:
    cli = Session.open(".").settings
    assert cli.prefix == str(ws / "out") and cli.executor_info_base_path == str(ws / "out" / "experiments")
    assert cli.root == ws and cli.cache_dir == ws / ".marinbuild" and cli.jobs == 3
    assert compute_output_path("a", {}).startswith(str(ws / "out" / "a-"))
    marin = executor_main(steps=[], args=[]).settings  # Marin's flags left out
    assert (marin.prefix, marin.executor_info_base_path, marin.root) == (cli.prefix, cli.executor_info_base_path, ws)


def test_the_prefix_comes_from_the_flag_then_marin_prefix_then_the_workspace(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARIN_PREFIX", "gs://bucket/p/")
    assert Settings.resolve(None).prefix == "gs://bucket/p"
    assert Settings.resolve(None).executor_info_base_path == "gs://bucket/p/experiments"
    assert Session.open(".", prefix="/elsewhere").settings.prefix == "/elsewhere"
    monkeypatch.delenv("MARIN_PREFIX")
    assert Settings.resolve(None).prefix == "/tmp/marin"  # Marin's default, outside any workspace


def test_the_backend_comes_from_the_flag_then_the_environment_then_the_workspace(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Session.open(".").settings.backend == "local"
    assert Session.open(".", ray_address="127.0.0.1:1").settings.backend == "ray"  # an address means Ray
    monkeypatch.setenv("MARINBUILD_BACKEND", "ray")
    assert Session.open(".").settings.backend == "ray" and Executor("/p", "/p/e").settings.backend == "ray"
    assert Session.open(".", backend="local").settings.backend == "local"
    monkeypatch.setenv("MARINBUILD_BACKEND", "threads")
    with pytest.raises(SettingsError, match="unknown backend 'threads'"):
        Settings.resolve(None)


def test_a_bad_workspace_setting_names_itself(ws: Path) -> None:
    (ws / "pyproject.toml").write_text('[tool.marinbuild]\nstale_after = "soon"\n')
    with pytest.raises(SettingsError, match=r"\[tool.marinbuild\] stale_after must be a number of seconds"):
        Session.open(".")
