"""The loopback proxy's ``preconditions`` setting (``running_server(preconditions=True)``): ``ifGenerationMatch``
on simple uploads answered as GCS answers it, which the installed fake-gcs-server ignores and tensorstore's OCDBT
checkpoints written by several processes need (the tootsie rehearsal runs behind it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from fakegcs import running_server, seed_folder


def upload(url: str, data: bytes, if_generation: int | None) -> tuple[int, int | None]:
    """A simple (``uploadType=media``) upload of object ``x``: (status, the generation written)."""
    condition = "" if if_generation is None else f"&ifGenerationMatch={if_generation}"
    request = urllib.request.Request(
        f"{url}/upload/storage/v1/b/pre/o?uploadType=media&name=x{condition}", data=data, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, int(json.loads(response.read())["generation"])
    except urllib.error.HTTPError as error:
        return error.code, None


def test_a_simple_upload_at_the_wrong_generation_is_refused_with_412(tmp_path):
    with running_server(seed_folder(tmp_path, "pre", ["seed"]), preconditions=True) as url:
        status, first = upload(url, b"one", 0)
        assert status == 200 and first
        assert upload(url, b"two", 0) == (412, None)  # it exists now: a second creator loses
        assert upload(url, b"two", first + 1)[0] == 412
        status, second = upload(url, b"two", first)
        assert status == 200 and second != first
        assert upload(url, b"three", None)[0] == 200  # no precondition: written whatever the generation
        with urllib.request.urlopen(f"{url}/download/storage/v1/b/pre/o/x?alt=media", timeout=10) as response:
            assert response.read() == b"three"
