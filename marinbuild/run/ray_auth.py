"""Ray token authentication: where the token comes from, and one-line errors (the CLI's exit 2). With
``RAY_AUTH_MODE=token`` (Ray >= 2.53) ``ray.init`` and ``JobSubmissionClient`` send the token themselves, from
``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``; this module checks before
connecting that there is one, and words Ray's authentication failures. It never imports Ray."""

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
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"


def token_path() -> Path:
    configured = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(configured).expanduser() if configured else Path.home() / ".ray" / "auth_token"


def token_source() -> str:
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
    hint = GET_TOKEN_HINT.format(path=token_path())
    if not token_auth_enabled():
        return RayAuthError(
            f"the Ray cluster at {where} requires token authentication: set RAY_AUTH_MODE=token and {hint}"
        )
    return RayAuthError(f"the Ray cluster at {where} refused the token read from {token_source()}: {hint}")


def connect_error(where: str, exc: BaseException) -> RayAuthError:
    """``ray.init`` could not connect to ``where`` (a GCS that refuses a token looks like one out of reach)."""
    msg = f"cannot connect to the Ray cluster at {where} ({' '.join(str(exc).split()) or type(exc).__name__})"
    hint = GET_TOKEN_HINT.format(path=token_path())
    if token_auth_enabled():
        return RayAuthError(f"{msg}: is it up, and does it accept the token read from {token_source()}? If not, {hint}")
    return RayAuthError(f"{msg}: is it up? If it uses token authentication, set RAY_AUTH_MODE=token and {hint}")


def is_auth_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (from Ray's job client or ``ray.init``) is an authentication failure."""
    return type(exc).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(exc)
