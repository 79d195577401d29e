"""The state one build owns, handed down to what needs it instead of kept in module globals.

As ninja's ``State``, a ``BuildContext`` is made for one build by whoever starts it (``Engine.run``, which
the CLI and the Marin facade both call), passed to the planner's status reads and to every ``StepJob``, and
closed when the build ends:

- ``lease_keeper``: the thread renewing the leases this build holds (``marinbuild.run.leases``); closing
  the build ends it, so a process that runs many builds keeps no idle keeper thread.

What stays process-wide, on purpose: the GCS client (``marinbuild.store.gcs.filesystem``: a connection
pool and an event-loop thread per endpoint, with its request count and what it learnt of the server),
imported rules modules and shipped code (Python's own module table is per process), and Marin's
process-wide mirror budget (``$MARIN_MIRROR_BUDGET_GB``, as Marin keeps it).
"""

from __future__ import annotations

from marinbuild.run.leases import LeaseKeeper

__all__ = ["BuildContext"]


class BuildContext:
    """What one build owns (see the module docstring); a context manager that closes it."""

    def __init__(self) -> None:
        self.lease_keeper = LeaseKeeper()

    def close(self) -> None:
        """End the build: stop renewing leases."""
        self.lease_keeper.close()

    def __enter__(self) -> BuildContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
