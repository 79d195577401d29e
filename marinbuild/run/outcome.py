"""What a build did: which steps ran, were found built, failed, were stopped by a failed dependency, or skipped."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class Outcome:
    ran: list[Hashable] = field(default_factory=list)
    cached: list[Hashable] = field(default_factory=list)
    failed: dict[Hashable, BaseException] = field(default_factory=dict)
    dep_failed: dict[Hashable, Hashable] = field(default_factory=dict)
    """Step -> the failed dependency that stopped it."""
    skipped: list[Hashable] = field(default_factory=list)
    interrupted: bool = False
