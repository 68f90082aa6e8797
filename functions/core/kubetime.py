"""Kubernetes' timestamps (RFC 3339 in UTC, "2026-12-06T22:00:00Z") read as aware datetimes. Pure."""

from __future__ import annotations

import datetime as dt
from typing import Any


def parsed(value: Any) -> dt.datetime | None:
    """The time a field says; None where it is absent or not a timestamp (an object from another writer)."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
