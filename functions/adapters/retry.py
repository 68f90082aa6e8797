"""Retry of transient cloud errors (429, 5xx, timeouts, dropped connections) with capped, jittered
exponential backoff (tenacity). Each adapter passes a `translate` that turns its client's exceptions
into functions.core.errors; permanent errors are raised at once, transient ones after the last attempt,
so the platform's own event retry takes over."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

from functions.core.errors import is_transient

T = TypeVar("T")
log = logging.getLogger(__name__)


def _same(exc: Exception) -> Exception:
    return exc


def with_retries(
    call: Callable[[], T],
    what: str,
    attempts: int = 4,
    base_s: float = 0.25,
    cap_s: float = 4.0,
    sleep: Callable[[float], None] = time.sleep,
    translate: Callable[[Exception], Exception] = _same,
) -> T:
    def translated() -> T:
        try:
            return call()
        except Exception as exc:
            mapped = translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s: transient %s (attempt %d/%d), retrying in %.2fs",
            what,
            type(error).__name__,
            state.attempt_number,
            attempts,
            state.upcoming_sleep,
        )

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_random_exponential(multiplier=base_s, max=cap_s),
        retry=tenacity.retry_if_exception(is_transient),
        before_sleep=before_sleep,
        sleep=sleep,
        reraise=True,
    )
    return retrying(translated)
