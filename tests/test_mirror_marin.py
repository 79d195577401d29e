"""One ``mirror://``: marinbuild's, whichever of marinbuild and Marin's ``rigging.filesystem`` is imported first,
and Marin's ``rigging.filesystem.mirror_budget`` bounds its copies (local folders as the two regions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from marinbuild.store import mirror

MB = 1 << 20


@pytest.fixture
def regions(tmp_path: Path):
    local, region = tmp_path / "local", tmp_path / "region"
    (region / "documents").mkdir(parents=True)
    local.mkdir()
    mirror.configure(local_prefix=str(local), remote_prefixes=[str(region)])
    try:
        yield local, region
    finally:
        mirror.configure()


@pytest.mark.parametrize("first", ["rigging.filesystem", "marinbuild.store.mirror"])
def test_one_registration_whatever_the_import_order(first: str) -> None:
    pytest.importorskip("rigging.filesystem")
    other = "marinbuild.store.mirror" if first == "rigging.filesystem" else "rigging.filesystem"
    code = (
        f"import {first}, {other}, fsspec, marinbuild.store.mirror as m\n"
        "print(fsspec.get_filesystem_class('mirror') is m.MirrorFileSystem)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr


def test_marins_mirror_budget_bounds_our_copies(regions) -> None:
    rigging_fs = pytest.importorskip("rigging.filesystem")
    local, region = regions
    (region / "documents" / "big.bin").write_bytes(b"\0" * (2 * MB))
    with rigging_fs.mirror_budget(1 / 1024):  # 1 MiB
        with pytest.raises(mirror.TransferBudgetExceeded, match=r"rigging\.filesystem\.mirror_budget"):
            fsspec.open("mirror://documents/big.bin", "rb").open()
    assert not (local / "documents" / "big.bin").exists()
    (region / "documents" / "more.bin").write_bytes(b"\1" * (2 * MB))
    with rigging_fs.mirror_budget(3 / 1024):  # 3 MiB
        with fsspec.open("mirror://documents/big.bin", "rb") as f:
            assert len(f.read()) == 2 * MB
        # the first copy was charged to Marin's budget: 2 MiB more would go over it
        with pytest.raises(mirror.TransferBudgetExceeded, match=r"rigging\.filesystem\.mirror_budget"):
            fsspec.open("mirror://documents/more.bin", "rb").open()
    assert (local / "documents" / "big.bin").stat().st_size == 2 * MB
    assert not (local / "documents" / "more.bin").exists()
