"""A step's Ray payload (``run/ray_task.py``): a class is pickled once per driver and loaded once per worker; every
payload still carries it, a class of the same name with other code stays itself, an importable class is the module's."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import PurePosixPath

from marinbuild.run.ray_task import pickle_payload

LOAD = """
import pathlib, pickle, sys
from marinbuild.run.ray_task import load_payload
values = [load_payload(p) for p in pickle.load(sys.stdin.buffer)]
assert all(type(v[1]) is pathlib.PurePosixPath and str(v[1]) == "scope" for v in values)
print(type(values[0][0]) is type(values[1][0]), *(v[0].scaled() for v in values))
"""


def _config_class(factor: int) -> type:
    @dataclasses.dataclass
    class Config:  # a local class: cloudpickle ships it by value, as a script's own config class
        n: int

        def scaled(self) -> int:
            return factor * self.n

    return Config


def test_payloads_load_a_class_by_value_once_and_keep_classes_of_one_name_apart() -> None:
    doubling, tripling = _config_class(2), _config_class(3)
    scope = PurePosixPath("scope")  # an importable class: pickled by reference, once
    payloads = [pickle_payload((doubling(n), scope)) for n in (1, 2)] + [pickle_payload((tripling(5), scope))]
    out = subprocess.run(
        [sys.executable, "-c", LOAD], input=pickle.dumps(payloads), capture_output=True, check=True, text=False
    )
    assert out.stdout.decode().split() == ["True", "2", "4", "15"]
    # each payload stands alone: one loaded by itself in a fresh process has its class
    alone = subprocess.run(
        [sys.executable, "-c", LOAD.replace("values[1]", "values[0]")],
        input=pickle.dumps(payloads[2:]),
        capture_output=True,
        check=True,
    )
    assert alone.stdout.decode().split() == ["True", "15"]
