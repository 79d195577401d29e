"""Ray token authentication as marinbuild's cluster commands see it: where the token comes from, and errors.

Ray (>= 2.53) authenticates every client of a cluster started with ``RAY_AUTH_MODE=token``:
``ray.init`` and ``JobSubmissionClient`` read the token themselves (Ray's own loader), from
``RAY_AUTH_TOKEN`` if set, else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``.
marinbuild never sends the token itself; this module only

- says which source Ray reads (``token_source``) and checks before connecting that it holds a
  token (``check_token``), and
- turns Ray's authentication failures into ``RayAuthError``: one line naming the file that was
  read and how to get a token (the CLI prints it and exits 2).

Nothing here imports Ray.
"""

from __future__ import annotations

import os
from pathlib import Path

GET_TOKEN_HINT = (
    "get the cluster's token from whoever started it (it is the file RAY_AUTH_TOKEN_PATH or "
    "~/.ray/auth_token on the head node; `ray get-auth-token` there prints it) and save it to {path}, "
    "or point RAY_AUTH_TOKEN_PATH at it"
)


class RayAuthError(Exception):
    """The cluster wants a token this process did not send, or refused the one it sent (exit 2)."""


def token_auth_enabled() -> bool:
    """Whether Ray clients in this process authenticate with a token (``RAY_AUTH_MODE=token``)."""
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"


def token_path() -> Path:
    """The token file Ray reads: ``RAY_AUTH_TOKEN_PATH``, else Ray's default ``~/.ray/auth_token``."""
    configured = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(configured).expanduser() if configured else Path.home() / ".ray" / "auth_token"


def token_source() -> str:
    """What Ray takes the token from, as said in messages: the variable ``RAY_AUTH_TOKEN`` or the file."""
    return "$RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else str(token_path())


def check_token() -> None:
    """With token authentication on, raise ``RayAuthError`` unless Ray will find a token to send."""
    if not token_auth_enabled() or os.environ.get("RAY_AUTH_TOKEN"):
        return
    path = token_path()
    try:
        if path.read_text().strip():
            return
        problem = "is empty"
    except FileNotFoundError:
        problem = "does not exist"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    raise RayAuthError(f"RAY_AUTH_MODE=token but the token file {path} {problem}: {GET_TOKEN_HINT.format(path=path)}")


def auth_error(where: str) -> RayAuthError:
    """The one-line error for a cluster at ``where`` that refused this process's token (or its lack of one)."""
    if not token_auth_enabled():
        return RayAuthError(
            f"the Ray cluster at {where} requires token authentication: set RAY_AUTH_MODE=token and "
            f"{GET_TOKEN_HINT.format(path=token_path())}"
        )
    return RayAuthError(
        f"the Ray cluster at {where} refused the token read from {token_source()}: "
        f"{GET_TOKEN_HINT.format(path=token_path())}"
    )


def connect_error(where: str, exc: BaseException) -> RayAuthError:
    """The one-line error for ``ray.init`` failing to connect to ``where`` (Ray does not say whether the token was
    the reason: a GCS that refuses a token looks like one that cannot be reached)."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    hint = GET_TOKEN_HINT.format(path=token_path())
    if token_auth_enabled():
        return RayAuthError(
            f"cannot connect to the Ray cluster at {where} ({reason}): is it up, and does it "
            f"accept the token read from {token_source()}? If not, {hint}"
        )
    return RayAuthError(
        f"cannot connect to the Ray cluster at {where} ({reason}): is it up? If it uses token "
        f"authentication, set RAY_AUTH_MODE=token and {hint}"
    )


def is_auth_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (from Ray's job client or ``ray.init``) is an authentication failure."""
    return type(exc).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(exc)
