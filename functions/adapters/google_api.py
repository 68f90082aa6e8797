"""Errors of Google's client libraries (google.api_core, google-auth transports) as functions.core.errors."""

from __future__ import annotations

from functions.core import errors

TRANSPORT_ERRORS = frozenset(
    {
        "ConnectionError",
        "Timeout",
        "ReadTimeout",
        "ConnectTimeout",
        "ProtocolError",
        "TransportError",
        "RetryError",
        "DeadlineExceeded",
        "ChunkedEncodingError",
    }
)


def translate(exc: Exception) -> Exception:
    if type(exc).__name__ == "FailedPrecondition":  # GKE: another operation is running on the cluster
        return errors.Conflict(str(exc), 400)
    code = getattr(exc, "code", None)
    if isinstance(code, int) and type(exc).__module__.startswith("google.api_core"):
        return errors.from_status(code, getattr(exc, "message", None) or str(exc))
    if type(exc).__name__ in TRANSPORT_ERRORS:
        return errors.TransientError(f"{type(exc).__name__}: {exc}")
    return exc
