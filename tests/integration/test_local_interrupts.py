"""`raytune local`'s signal handling: a SIGINT or SIGTERM landing at any moment, the instant the clean-up
begins included, either interrupts the run or waits for its clean-up; it never escapes as a traceback
(stop 17's CI failure: a SIGINT landed as the driver's `finally` began and the record was never printed)."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from functools import partial

import pytest

from functions.local.interrupts import Interrupts


def busy(seconds: float) -> None:
    """Python bytecode all the way, so that a pending signal's handler runs inside it."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def signal_after(delay_s: float, sig: signal.Signals) -> threading.Thread:
    def send() -> None:
        time.sleep(delay_s)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def run_signalled(delay_s: float, senders: list[threading.Thread]) -> None:
    """A 1 ms run; the SIGINT sender starts inside it, so no signal lands before the guard."""
    senders.append(signal_after(delay_s, signal.SIGINT))
    busy(0.001)


@pytest.fixture
def prompt_threads():
    """The sender thread gets the GIL within microseconds of its sleep ending, not the default 5 ms."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def test_a_signal_at_any_moment_interrupts_the_run_or_waits_for_the_clean_up(prompt_threads):
    rng = random.Random(17)
    said: list[str] = []
    outcomes = {"interrupted": 0, "late": 0}
    for _ in range(300):
        with Interrupts(said.append) as interrupts:
            # The run takes 1 ms and its clean-up 1 ms; the signal lands anywhere in the 2 ms, around the disarm.
            senders: list[threading.Thread] = []
            failure, interrupted = interrupts.guard(partial(run_signalled, rng.uniform(0, 0.002), senders))
            busy(0.001)
            for sender in senders:
                sender.join()
            busy(0.0005)  # a signal sent just now is handled here, inside the block
            assert failure is None
            assert (interrupted is not None) != bool(interrupts.late), (interrupted, interrupts.late)
            if interrupted is not None:
                assert interrupted.signum == signal.SIGINT
                outcomes["interrupted"] += 1
            else:
                assert interrupts.late == [signal.SIGINT]
                outcomes["late"] += 1
    assert outcomes["interrupted"] and outcomes["late"], outcomes  # both sides of the disarm were hit


def test_only_the_first_signal_interrupts_later_ones_are_remembered():
    said: list[str] = []
    with Interrupts(said.append) as interrupts:

        def body() -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            busy(0.05)

        failure, interrupted = interrupts.guard(body)
        assert failure is None and interrupted is not None and interrupted.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # while stopping: remembered, the clean-up goes on
        busy(0.05)
    assert interrupts.late == [signal.SIGINT] and said == ["still stopping; one moment"]


def test_closing_the_terminal_is_an_interrupt_too():
    with Interrupts(lambda _: None) as interrupts:

        def body() -> None:
            os.kill(os.getpid(), signal.SIGHUP)
            busy(0.05)

        failure, interrupted = interrupts.guard(body)
    assert failure is None and interrupted is not None and interrupted.signum == signal.SIGHUP


def test_an_error_in_the_run_is_returned_and_disarms():
    with Interrupts(lambda _: None) as interrupts:

        def body() -> None:
            raise RuntimeError("dashboard gone")

        failure, interrupted = interrupts.guard(body)
        assert isinstance(failure, RuntimeError) and interrupted is None and not interrupts.armed


def test_the_previous_handlers_come_back():
    # Python's own handler, whatever this test process was given (a parallel test worker may ignore SIGINT, or an
    # earlier test in it may have installed another)
    given = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Interrupts(lambda _: None):
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            busy(0.05)
    finally:
        signal.signal(signal.SIGINT, given)
