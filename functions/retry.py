"""Retry of transient cloud errors (429, 5xx, timeouts, dropped connections) with capped, jittered backoff.

Anything else is permanent and raised at once. After the last attempt the error is raised, so the
platform's own event retry takes over.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)
TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class TransientError(Exception):
    """Raised by adapters for a condition worth retrying that carries no HTTP status."""


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (TransientError, ConnectionError, TimeoutError)):
        return True
    # google.api_core errors carry `code`, kubernetes ApiException carries `status`: duck-typed so this
    # module does not import either client.
    for attr in ("code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and value in TRANSIENT_STATUS:
            return True
    name = type(exc).__name__
    return name in {"ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout", "ProtocolError",
                    "MaxRetryError", "NewConnectionError", "DeadlineExceeded", "ServiceUnavailable",
                    "RetryError", "TransportError"}


def with_retries(call: Callable[[], T], what: str, attempts: int = 4, base_s: float = 0.25,
                 cap_s: float = 4.0, sleep: Callable[[float], None] = time.sleep) -> T:
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - classified just below
            if attempt == attempts or not is_transient(exc):
                raise
            delay = min(cap_s, base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            log.warning("%s: transient %s (attempt %d/%d), retrying in %.2fs",
                        what, type(exc).__name__, attempt, attempts, delay)
            sleep(delay)
    raise AssertionError("unreachable")
