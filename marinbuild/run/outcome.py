"""What a build did: which steps ran, were found built, failed, were stopped by a failed dependency, or skipped.
The scheduler fills one per run (``K``: the engine's ``ExecutorStep``); a step is in at most one list."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class Outcome(Generic[K]):
    ran: list[K] = field(default_factory=list)
    cached: list[K] = field(default_factory=list)
    failed: dict[K, BaseException] = field(default_factory=dict)
    dep_failed: dict[K, K] = field(default_factory=dict)
    """Step -> the failed dependency that stopped it."""
    skipped: list[K] = field(default_factory=list)
    interrupted: bool = False
    """The run was stopped (Ctrl-C): some needed steps may be in no list."""
