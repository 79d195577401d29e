"""A ``download`` target's attribute mistakes are load errors: the real CLI in a child process exits 2 with one
line naming the BUILD file, the line and column of the attribute at fault (or of the call), and runs nothing.

Every source is on loopback's discard port, so a check that let a mistake through to the build would fail
there with another code and message, never pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from workspaces import assert_one_line_load_error, write_workspace

from marinbuild.ml.checksums import KNOWN
from marinbuild.ml.download_attrs import HEX_LENGTHS

URL = "http://127.0.0.1:9/data/"
SHA256 = "sha256:" + "0" * 64

# (what is wrong, the attributes after name, the attribute the error points at or None for the call, message)
CASES = [
    ("no revision", 'hf_dataset = "org/data"', "hf_dataset", "hf_dataset needs a revision"),
    (
        "two sources",
        f'url = "{URL}", hf_dataset = "org/data", revision = "abc1234"',
        "url",
        "give one of hf_dataset (a Hub dataset id) and url, not both",
    ),
    ("no source", 'patterns = ["*.jsonl"]', None, "give the source: hf_dataset"),
    (
        "a URL as hf_dataset",
        f'hf_dataset = "{URL}", revision = "main"',
        "hf_dataset",
        "hf_dataset is a Hub dataset id (org/name), not a URL",
    ),
    ("revision with url", f'url = "{URL}", revision = "abc1234"', "revision", "revision is for hf_dataset"),
    (
        "checksums with the Hub",
        f'hf_dataset = "org/data", revision = "abc1234", checksums = {{"a": "{SHA256}"}}',
        "checksums",
        "checksums are for url sources",
    ),
    (
        "checksum of an unknown kind",
        f'url = "{URL}", checksums = {{"a.jsonl": "sha1:{"0" * 40}"}}',
        "checksums",
        "checksums['a.jsonl']: 'sha1:",
    ),
    (
        "checksum without a kind",
        f'url = "{URL}", checksums = {{"a.jsonl": "{"0" * 64}"}}',
        "checksums",
        "is not '<kind>:<hex>' with kind one of sha256, git_sha1, md5, crc32c",
    ),
    (
        "checksum too short",
        f'url = "{URL}", checksums = {{"a.jsonl": "sha256:9f2c"}}',
        "checksums",
        "checksums['a.jsonl']: a sha256 is 64 hex digits, got '9f2c'",
    ),
    (
        "checksum not hex",
        f'url = "{URL}", checksums = {{"a.jsonl": "md5:{"z" * 32}"}}',
        "checksums",
        "a md5 is 32 hex digits",
    ),
    (
        "checksum not a string",
        f'url = "{URL}", checksums = {{"a.jsonl": 5}}',
        "checksums",
        "checksums['a.jsonl']: expected a string '<kind>:<hex>'",
    ),
    (
        "checksum of an absolute path",
        f'url = "{URL}", checksums = {{"/a.jsonl": "{SHA256}"}}',
        "checksums",
        "the key is a file's path relative to the url",
    ),
    (
        "patterns not a list",
        f'url = "{URL}", patterns = "*.jsonl"',
        "patterns",
        "attribute 'patterns' of download(name='dl'): expected a list, got str '*.jsonl'",
    ),
    ("a pattern not a string", f'url = "{URL}", patterns = [3]', "patterns", "element 0: expected a string"),
    ("an empty pattern", f'url = "{URL}", patterns = ["*.jsonl", ""]', "patterns", "patterns[1] is empty"),
    ("subdir outside", f'url = "{URL}", subdir = "a/../../b"', "subdir", "subdir 'a/../../b' leaves the output"),
    ("no workers", f'url = "{URL}", workers = 0', "workers", "workers must be at least 1, got 0"),
]


def _build_file(attrs: str) -> str:
    return textwrap.dedent(f"""\
        load("@marinbuild//rules:download.py", "download")

        download(
            name = "dl",
            {attrs},
        )
        """)


def _location(text: str, attribute: str | None) -> str:
    """``line:col`` of ``attribute =`` in ``text`` (the attributes' line), or of the ``download(`` call."""
    if attribute is None:
        return "3:1"
    line = text.splitlines()[4]
    return f"5:{line.index(attribute + ' =') + 1}"


def _marinbuild(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(("attrs", "attribute", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_attribute_mistake_is_a_load_error_at_the_attribute(tmp_path, attrs, attribute, message):
    text = _build_file(attrs)
    root = write_workspace(tmp_path / "ws", {"pipe/BUILD.marin": text})
    assert_one_line_load_error(root, "//pipe:dl", f"pipe/BUILD.marin:{_location(text, attribute)}", message)


def test_query_reports_the_mistake_too_and_a_correct_target_loads(tmp_path):
    """The check is part of loading: ``query`` (which builds nothing) fails on it, and passes without it."""
    root = write_workspace(tmp_path / "ws", {"pipe/BUILD.marin": _build_file('hf_dataset = "org/data"')})
    result = _marinbuild(root, "query", "//pipe:all")
    assert (
        result.returncode == 2
        and "pipe/BUILD.marin:5:5: download(name='dl'): hf_dataset needs a revision" in result.stderr
    ), result.stderr
    good = f'url = "{URL}", patterns = ["**/*.jsonl"], checksums = {{"a/b.jsonl": "sha256:{"AB" * 32}"}}'
    (root / "pipe" / "BUILD.marin").write_text(_build_file(good))
    result = _marinbuild(root, "query", "//pipe:all")
    assert result.returncode == 0, result.stderr
    assert "//pipe:dl" in result.stdout


def test_every_checksum_kind_has_its_length():
    assert set(HEX_LENGTHS) == set(KNOWN)
