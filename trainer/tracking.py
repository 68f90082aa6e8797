"""The run in the trackers people already watch (functions/core/tracking.py has the config and the table).

One interface, a logger per destination (torchtune's shape, `torchtune/training/metric_logging.py`), each with
its tool's own client: MLflow's `MlflowClient`, W&B's `wandb.init`. Rank 0 of the workers opens the run (found
again by its `raytune.run_id` tag on a later attempt or worker restart, so each run is one tracked run), logs the
config once as flat parameters and every logged step's metrics, and closes with what it could not deliver; the
job's driver opens a sweep's parent run before its trials and, at the end, logs the evaluation, the adapter's
location (or a copy) and the run's state.

A tracker never fails a run and never holds a step: a step's points only go on a queue, which a thread sends
(retried, with a bounded wait at the end); whatever was not sent is counted and said once in the run's story.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from functions.core import tracking as spec
from functions.core.config import RunConfig
from functions.core.errors import describe
from functions.core.result import ATTEMPT_ENV, INPUTS_ENV, TrackedRun
from functions.core.secrets import redact

log = logging.getLogger("raytune.tracking")

END_BOUND_S = 30.0  # at the end, the most the last points may take to send
QUEUED_POINTS = 100_000  # beyond this, a slow tracker's points are counted lost, never kept in memory
RETRIES = 3
BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics a call
# MLflow's own client retries a call up to 7 times over minutes and waits 120 s for an answer: bounded here, where
# the delivery thread retries; a user's own setting wins.
MLFLOW_CLIENT_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@dataclasses.dataclass
class Identity:
    """Which tracked run a process logs to: the raytune run (and trial), its attempt and region, the parents a
    sweep's driver opened, and the tracking URIs the driver resolved. Travels to the workers as JSON."""

    run_id: str
    config_name: str
    attempt: int = 1
    region: str | None = None
    trial: str | None = None
    parents: dict[str, str] = dataclasses.field(default_factory=dict)  # destination -> the sweep's tracked run
    uris: dict[str, str] = dataclasses.field(default_factory=dict)
    kind: str = "run"  # run | sweep (a sweep's parent) | trial

    def tags(self) -> dict[str, str]:
        tags = {
            spec.RUN_ID_TAG: self.run_id,
            spec.CONFIG_NAME_TAG: self.config_name,
            spec.ATTEMPT_TAG: str(self.attempt),
            spec.KIND_TAG: self.kind,
        }
        if self.region:
            tags[spec.REGION_TAG] = self.region
        if self.trial:
            tags[spec.TRIAL_TAG] = self.trial
        if code := os.environ.get("RAYTUNE_CODE_SHA256"):
            tags[spec.CODE_TAG] = code
        if dataset := os.environ.get(INPUTS_ENV):
            tags[spec.DATASET_TAG] = dataset
        return tags


def identity(cfg: RunConfig, run_id: str, attempt: int | None = None, kind: str = "run") -> Identity:
    """The driver's: the URIs resolved once (the config's, else MLflow's own MLFLOW_TRACKING_URI, which
    `raytune local` sets to the workdir's store); the attempt the controller said (None: its environment's,
    1 for a job started by hand)."""
    if attempt is None:
        attempt = int(os.environ.get(ATTEMPT_ENV) or 1)
    uris = {}
    if cfg.tracking and cfg.tracking.mlflow:
        uri = cfg.tracking.mlflow.uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            uris["mlflow"] = uri
    return Identity(run_id, cfg.name, attempt, cfg.cluster.region, uris=uris, kind=kind)


def of_trial(sweep: Identity, trial: str) -> Identity:
    """A sweep's trial: a child of the sweep's parent run in each destination."""
    return dataclasses.replace(sweep, trial=trial, kind="trial")


class Delivery:
    """Points sent in the background by `send`, a batch at a time, each batch retried; `put` never waits."""

    def __init__(self, send: Callable[[list[Any]], None], backoff_s: float = 1.0) -> None:
        self.send, self.backoff_s = send, backoff_s
        self.queue: queue.Queue[list[Any] | None] = queue.Queue()
        self.lock = threading.Lock()
        self.put_points = self.sent = self.lost = 0
        self.error: str | None = None
        self.closed: tuple[int, int, str | None] | None = None
        self.thread = threading.Thread(target=self._loop, name="raytune-tracking", daemon=True)
        self.thread.start()

    def put(self, points: list[Any]) -> None:
        with self.lock:
            self.put_points += len(points)
            if self.put_points - self.sent - self.lost > QUEUED_POINTS:
                self.lost += len(points)
                self.error = self.error or "the tracker fell behind (too many points queued)"
                return
        self.queue.put(points)

    def _batches(self) -> Iterator[list[Any]]:
        while (points := self.queue.get()) is not None:
            while len(points) < BATCH:  # what else is queued goes in the same call
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.queue.put(None)
                    break
                points = points + more
            for start in range(0, len(points), BATCH):
                yield points[start : start + BATCH]

    def _loop(self) -> None:
        for batch in self._batches():
            for attempt in range(RETRIES):
                try:
                    self.send(batch)
                except Exception as exc:
                    with self.lock:
                        self.error = redact(describe(exc, 300))
                    time.sleep(self.backoff_s * 2**attempt)
                    continue
                with self.lock:
                    self.sent += len(batch)
                break
            else:
                with self.lock:
                    self.lost += len(batch)

    def close(self, bound_s: float = END_BOUND_S) -> tuple[int, int, str | None]:
        """(points logged, points not delivered, the last error): waits at most `bound_s` for the queue. Closed
        once: a later call says the same."""
        if self.closed is not None:
            return self.closed
        self.queue.put(None)
        self.thread.join(bound_s)
        with self.lock:
            unsent = self.put_points - self.sent - self.lost
            if unsent:
                self.error = f"{self.error or 'the tracker was slow'}; {unsent} not sent within {bound_s:.0f} s"
            self.closed = (self.put_points, self.lost + unsent, self.error)
            return self.closed

    def tracked(self, **where: str | None) -> TrackedRun:
        """The run in its destination once delivery is closed: `where` it is (TrackedRun's run_id,
        experiment_id, url, uri) and what of its points did not reach it."""
        points, lost, error = self.close()
        return TrackedRun(points=points, undelivered=lost, error=error, **where)


class Logger:
    """One destination's run as a worker and a driver use it. Every method is best-effort: a destination that
    fails is remembered, said in the outcome, and the run goes on."""

    name = ""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        raise NotImplementedError

    def finish(self, summary: dict[str, float], tags: dict[str, str], state: str) -> None:
        raise NotImplementedError

    def close(self) -> TrackedRun:
        raise NotImplementedError


def flat_config(cfg: RunConfig) -> dict[str, str]:
    """The run's config as every destination's params take it: flat, its tracking section left out (it says where
    the run is tracked, not what was trained)."""
    return spec.flat_params(cfg.model_dump(mode="json", exclude={"tracking"}))


def numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric values of a Trainer's logs or a summary (never a flag), as floats."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def callback(loggers: list[Logger]) -> Any:
    """The Trainer's logs (every logging step and evaluation) to each logger, from rank 0 only."""
    from transformers import TrainerCallback

    class TrackingCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and logs:
                metrics = numbers(logs)
                for logger in loggers:
                    logger.log(state.global_step, metrics)

    return TrackingCallback()


def closed(loggers: list[Logger]) -> dict[str, dict[str, Any]]:
    return {logger.name: logger.close().model_dump(mode="json") for logger in loggers}
