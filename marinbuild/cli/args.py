"""The command line as users from Bazel and Marin type it, rewritten into marinbuild's own options.

``rewrite(args)`` turns Marin's boolean spellings (``--dry_run true``, as draccus parses them) into plain flags;
``unknown_command`` names the subcommand a mistyped word was meant to be, or None (then it is a pattern)."""

from __future__ import annotations

import difflib

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})

BOOLEAN_FLAGS: dict[str, tuple[str | None, str | None]] = {
    "--dry_run": ("--dry_run", None),
    "--force_run_failed": ("--force_run_failed", "--no-force_run_failed"),
    "--keep_going": ("--keep_going", "--nokeep_going"),
    "--check_up_to_date": ("--check_up_to_date", None),
    "--explain": ("--explain", None),
}
"""Boolean options that also take Marin's ``true|false`` value: (flag when true, flag when false; None: nothing)."""


def _boolean(word: str) -> bool | None:
    lowered = word.lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else None


def rewrite(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        name, eq, attached = arg.partition("=")
        if name in BOOLEAN_FLAGS:
            value = _boolean(attached) if eq else (_boolean(args[i + 1]) if i + 1 < len(args) else None)
            if value is not None:
                flag = BOOLEAN_FLAGS[name][0 if value else 1]
                if flag is not None:
                    out.append(flag)
                i += 1 if eq else 2
                continue
        out.append(arg)
        i += 1
    return out


def unknown_command(word: str, commands: list[str]) -> str | None:
    if any(c in word for c in "/:@.") or word.startswith("-"):  # written like a target pattern
        return None
    close = difflib.get_close_matches(word, sorted(commands), n=1, cutoff=0.6)
    return close[0] if close else None
