"""The state one build owns, handed down to what needs it instead of kept in module globals.

As ninja's ``State``, ``Engine.run`` makes one per build for the planner's status reads and every ``StepJob``,
and closes it at the end, so a process that runs many builds keeps no idle lease keeper thread. Process-wide on
purpose: the GCS client (connection pools, what it learnt of the server), imported rules modules and shipped
code (Python's module table is per process), and Marin's mirror budget (``$MARIN_MIRROR_BUDGET_GB``).
"""

from __future__ import annotations

from marinbuild.run.leases import LeaseKeeper


class BuildContext:
    """What one build owns; a context manager that closes it."""

    def __init__(self) -> None:
        self.lease_keeper = LeaseKeeper()

    def close(self) -> None:
        self.lease_keeper.close()

    def __enter__(self) -> BuildContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
