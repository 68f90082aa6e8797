"""SIGINT, SIGTERM and SIGHUP (the terminal closed) for `raytune local`: the first one, while the run is in
progress, raises Interrupted; any later one, or one that comes once the clean-up has begun, is only remembered,
so the clean-up is never cut short whatever the moment the signal lands (and a run that ended keeps its exit
code: a signal after its end cancels nothing).

Race-free by construction: the handler disarms itself before it raises, so at most one Interrupted is
ever raised, and `disarm()` is a single attribute store."""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP: the run is cancelled and everything it started is stopped."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interrupts:
    """Installed for the run's lifetime (a context manager); `disarm()` when the clean-up begins."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.armed = True
        self.late: list[int] = []  # signals that came while stopping
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> Interrupts:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def disarm(self) -> None:
        self.armed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            self.armed = False
            raise Interrupted(signum)
        self.late.append(signum)
        self.say("still stopping; one moment")

    def guard(self, body: Callable[[], None]) -> tuple[Exception | None, Interrupted | None]:
        """Run `body`, then disarm; return the error or the interrupt that ended it, never raise either.
        Nested so that an Interrupted raised anywhere up to the disarm (the except clause and the
        finally included) is caught; after the disarm none can be raised."""
        try:
            try:
                body()
            except Exception as exc:
                return exc, None
            finally:
                self.disarm()
        except Interrupted as interrupted:
            return None, interrupted
        return None, None
