"""Step functions of the traceback tests on Ray (imported by Ray workers): a step that fails two frames deep
with ``KeyError: 'missing_key'`` until its (unversioned) flag file exists."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from marinbuild.executor import ExecutorStep, this_output_path, versioned
from marinbuild.store import fs


@dataclass(frozen=True)
class FlakyConfig:
    output_path: Any = field(default_factory=this_output_path)
    text: Any = "x"
    fixed_flag: Any = None
    """Not versioned: once this file exists, the same step (same output path) succeeds."""


def lookup(config: FlakyConfig) -> str:
    table = {"text": config.text}
    if os.path.exists(config.fixed_flag):
        table["missing_key"] = "found"
    return write_value(table, config.output_path)


def write_value(table: dict, output_path: str) -> str:
    value = table["missing_key"]
    fs.write_atomic(fs.join(output_path, "value.txt"), value.encode())
    return value


def flaky(name: str, fixed_flag: str, text: str = "x") -> ExecutorStep:
    return ExecutorStep(name=name, fn=lookup, config=FlakyConfig(text=versioned(text), fixed_flag=fixed_flag))
