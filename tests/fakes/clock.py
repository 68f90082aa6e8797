"""A clock the tests move by hand (deadlines, claims)."""

from __future__ import annotations

import datetime as dt
import threading


class FakeClock:
    def __init__(self):
        self.now = dt.datetime.now(dt.UTC)
        self.lock = threading.Lock()

    def __call__(self) -> dt.datetime:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += dt.timedelta(seconds=seconds)
