"""Progress lines for people: rank 0 prints one machine-readable line per Trainer log event
(`RAYTUNE_PROGRESS {...}`), which `raytune local` (and the logs command) turn into one readable line.
A marker and JSON survive Ray's log prefixes and colours."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from functions.core.result import PHASE_MARKER, PROGRESS_MARKER

KEPT = ("loss", "eval_loss", "learning_rate", "grad_norm", "mean_token_accuracy")


def progress_line(
    step: int, max_steps: int, epoch: float | None, logs: dict[str, Any], elapsed_s: float, trial: str | None = None
) -> str:
    event: dict[str, Any] = {"step": step, "max_steps": max_steps, "epoch": epoch, "elapsed_s": round(elapsed_s, 1)}
    if trial:
        event["trial"] = trial
    event.update({key: logs[key] for key in KEPT if isinstance(logs.get(key), (int, float))})
    if 0 < step < max_steps:
        event["eta_s"] = round(elapsed_s / step * (max_steps - step), 1)
    return PROGRESS_MARKER + json.dumps(event, sort_keys=True)


def callback(trial: str | None = None) -> Any:
    from transformers import TrainerCallback

    class ProgressCallback(TrainerCallback):
        """Prints a progress line on the main process at every log and evaluation (naming a sweep's trial)."""

        def __init__(self) -> None:
            self.started = time.monotonic()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.monotonic()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and logs and any(key in logs for key in ("loss", "eval_loss")):
                line = progress_line(
                    state.global_step, state.max_steps, state.epoch, logs, time.monotonic() - self.started, trial
                )
                print(line, flush=True)

    return ProgressCallback()


class Timeline:
    """The phases of a job's start and end: each printed as it begins and as it ends (with its seconds) when
    `shown` (the driver, rank 0), and kept in `seconds` for result.json. A sweep's trial names itself in each
    (two trials' phases interleave in one log)."""

    def __init__(self, shown: bool = True, trial: str | None = None) -> None:
        self.shown = shown
        self.trial = trial
        self.seconds: dict[str, float] = {}

    def _print(self, phase: str, seconds: float | None = None) -> None:
        if self.shown:
            event: dict[str, Any] = {"phase": phase}
            if seconds is not None:
                event["seconds"] = seconds
            if self.trial:
                event["trial"] = self.trial
            print(PHASE_MARKER + json.dumps(event), flush=True)

    def begun(self, phase: str) -> None:
        self._print(phase)

    def ended(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = round(seconds, 2)
        self._print(phase, self.seconds[phase])

    @contextlib.contextmanager
    def phase(self, phase: str) -> Iterator[None]:
        self.begun(phase)
        started = time.monotonic()
        yield
        self.ended(phase, time.monotonic() - started)
