"""Children a test interrupts with Ctrl-C (SIGINT) start with SIGINT's default disposition.

A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored across
``exec``, so a test suite run as ``make test &`` (or under ``nohup``) would start every child with
Ctrl-C ignored, and a test of what Ctrl-C does would test nothing. Python turns SIGINT into
``KeyboardInterrupt`` only when it starts with the default disposition, so the child gets that
back before it runs (``preexec_fn=default_sigint``).
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` of a child that a test stops with SIGINT: the default disposition, unblocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
