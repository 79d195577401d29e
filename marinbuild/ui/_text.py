"""Small text helpers shared by the listeners: durations and error descriptions."""

from __future__ import annotations


def format_duration(seconds: float) -> str:
    """``0.4s``, ``12.3s``, ``2m05s``, ``1h02m``."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def describe_error(step: str | None, error: BaseException | None) -> str:
    """One line for a step's error, ``Type: message`` (a ``StepError``'s own ``<step>:`` prefix dropped)."""
    if error is None:
        return "unknown error"
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if step and message.startswith(f"{step}: "):
        message = message[len(step) + 2 :]
    if type(error).__name__ == "StepError":
        return message or "StepError"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def error_text(error: BaseException | None) -> str | None:
    """The full error as machine formats record it: ``Type: message``, or None."""
    return None if error is None else f"{type(error).__name__}: {error}"
