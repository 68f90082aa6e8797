"""The controller's error vocabulary. Adapters translate their client's exceptions into these, so
handlers decide on an error's kind (retry later, give up, absent, changed) without importing a client.

    TransientError  worth another try: 408/429/5xx, timeouts, dropped connections, contention
    PermanentError  the same call fails the same way again: 400/401/403/404/422 from an API
    NotFound        the object is absent (a normal answer, not a failure)
    Conflict        the object changed since it was read (HTTP 409/412 on a precondition)
"""

from __future__ import annotations

import random

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class ControllerError(Exception):
    """Base of the errors adapters raise; `status` is the HTTP status where there was one."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class TransientError(ControllerError):
    pass


class PermanentError(ControllerError):
    pass


class NotFound(ControllerError):
    pass


class Conflict(ControllerError):
    pass


class TooLarge(PermanentError):
    """An object larger than the caller reads (checked before it is downloaded whole)."""


class ClusterGone(PermanentError):
    """The run's GKE cluster does not exist (deleted under it): a fact for the decision, not an outage."""


class NewerRelease(PermanentError):
    """A record written by a newer release (a higher format): this one never rewrites it, since it would drop the
    fields it does not know; the release that wrote it acts on it."""


class Unreadable(PermanentError):
    """A stored object that is not what the controller writes (not JSON, another model, too large, a record naming
    another run or holding a config no rules accept): moved aside and reported, never acted on. Caught by name, so
    a bug that raises a ValueError is never taken for one."""


class RetryRefused(ControllerError):
    """A run that cannot be retried now; the message is the answer to whoever asked."""


class Contended(TransientError):
    """A record kept changing under a read-modify-write: worth another try later, not a failure."""


# Writers of one object (a RayCluster's groups, its allocation in the bucket) that lose a compare-and-swap read
# again after a random pause, so a burst of them does not collide again in step: up to 0.2, 0.4, ... 2 s.
RACE_PAUSE_S, RACE_PAUSE_CAP_S = 0.2, 2.0


def race_pause(attempt: int) -> float:
    """The pause before try `attempt` (1: the first try again) of a writer that lost a compare-and-swap."""
    return random.uniform(0, min(RACE_PAUSE_CAP_S, RACE_PAUSE_S * 2 ** (attempt - 1)))


def from_status(status: int | None, message: str) -> ControllerError:
    """The error an HTTP status means, with the API's message."""
    text = f"HTTP {status}: {message}" if status else message
    if status is None or status in TRANSIENT_STATUS:
        return TransientError(text, status)
    if status == 404:
        return NotFound(text, status)
    if status in (409, 412):
        return Conflict(text, status)
    return PermanentError(text, status)


def is_transient(exc: BaseException) -> bool:
    """Adapters translate what they know; plain connection and timeout errors are transient too."""
    return isinstance(exc, (TransientError, ConnectionError, TimeoutError))


def describe(exc: BaseException, limit: int = 500) -> str:
    """A short reason for a record: our errors carry the API's message already."""
    text = str(exc) if isinstance(exc, ControllerError) else f"{type(exc).__name__}: {exc}"
    return text[:limit]
