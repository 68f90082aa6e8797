"""Cancel tokens of the runs this machine submitted: `submit` makes one per run and sends only its digest
(functions/core/policy.py); the token stays here (mode 0600) for `cancel`, or travels by hand (`--token`)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from functions.core.policy import cancel_digest


def folder() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "raytune" / "cancel-tokens"


def new() -> tuple[str, str]:
    """(token, digest) for a run about to be submitted."""
    token = secrets.token_urlsafe(32)
    return token, cancel_digest(token)


def keep(run_id: str, token: str) -> Path:
    path = folder() / run_id
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    return path


def find(run_id: str) -> str | None:
    path = folder() / run_id
    return path.read_text().strip() if path.is_file() else None
