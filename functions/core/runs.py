"""Run records and their state machine. One JSON object per run (`runs/<run_id>.json` in the bucket);
every change is decided by `functions.core.decide` and written with compare-and-swap.

    RECEIVED ──► REJECTED | SKIPPED (a nightly whose inputs are the last successful nightly's)
       │ ╲
       │  QUEUED (waits for worker nodes under cluster.max_worker_nodes, FIFO)
       │  ╱ │
       ├──► PROVISIONING ──► SUBMITTED ──► RUNNING ──► SUCCEEDED
       │    │                    │            │
       └────┴────────────────────┴────────────┴──► FAILED | CANCELLED
       (RECEIVED or QUEUED ──► SUBMITTED directly when the cluster is ready)

A marker `runs/active/<run_id>` lists the runs the watcher must still look at; it goes once a run
is terminal and its run-finished event is out (`settled`).
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from pydantic import BaseModel, Field, field_serializer, model_validator

from functions.core.champion import Promotion
from functions.core.config import RunConfig, stored_config
from functions.core.fingerprint import Inputs
from functions.core.result import RunResult


class State(enum.StrEnum):
    RECEIVED = "RECEIVED"  # the event was valid and recorded; its launch handler holds the run for a while
    REJECTED = "REJECTED"  # the config or event can never launch: every reason in `errors`
    SKIPPED = "SKIPPED"  # a nightly with nothing new to learn (functions/core/fingerprint.py): no cluster work
    QUEUED = "QUEUED"  # its worker nodes do not fit beside the live runs' yet; the watcher admits it in turn
    PROVISIONING = "PROVISIONING"  # the GKE cluster or its Ray operator is being created; the watcher resumes
    SUBMITTED = "SUBMITTED"  # RayCluster and RayJob applied; the job has not started running yet
    RUNNING = "RUNNING"  # the RayJob reports RUNNING
    SUCCEEDED = "SUCCEEDED"  # the job succeeded; the trainer's result is in `result`
    FAILED = "FAILED"  # the job failed, a deadline passed, or the run could not be submitted
    CANCELLED = "CANCELLED"  # cancelled on request; a submitted job was stopped first

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({State.REJECTED, State.SKIPPED, State.SUCCEEDED, State.FAILED, State.CANCELLED})
ALLOWED: dict[State, frozenset[State]] = {
    State.RECEIVED: frozenset(
        {
            State.REJECTED,
            State.SKIPPED,
            State.QUEUED,
            State.PROVISIONING,
            State.SUBMITTED,
            State.FAILED,
            State.CANCELLED,
        }
    ),
    State.QUEUED: frozenset({State.PROVISIONING, State.SUBMITTED, State.FAILED, State.CANCELLED}),
    State.PROVISIONING: frozenset({State.QUEUED, State.SUBMITTED, State.FAILED, State.CANCELLED}),
    State.SUBMITTED: frozenset({State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED}),
    State.RUNNING: frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED}),
}


class InvalidTransition(Exception):
    """A move the state machine does not allow: a bug in a decision, never silently dropped."""


class Transition(BaseModel):
    state: State
    at: dt.datetime
    reason: str | None = None


# The record format this release writes. 1: the releases before formats were versioned (no `format` field);
# 2: adds `format` (and sources may carry a cancel digest). Older formats are read as they are (their configs by
# the rules they were accepted under: config.stored_config); a newer one belongs to a newer release, and this
# one leaves it alone rather than rewrite it without the fields it does not know.
RECORD_FORMAT = 2


class RunRecord(BaseModel):
    format: int = RECORD_FORMAT
    run_id: str
    state: State
    source: dict[str, str]  # kind (upload | message | nightly) and ref (gs:// URI or message id)
    created_at: dt.datetime
    updated_at: dt.datetime
    config: dict[str, Any] | None = None  # the validated config, storage resolved
    raw_config: str | None = None  # kept for rejected configs only, redacted and truncated
    reason: str | None = None
    errors: list[str] = []
    warnings: list[str] = []  # right-sizing advice (functions/core/advice.py); the run goes ahead
    history: list[Transition] = []
    job: dict[str, Any] | None = None  # last RayJob status seen
    result: RunResult | None = None  # the trainer's result.json: checkpoints and metrics
    inputs: Inputs | None = None  # a nightly's fingerprinted inputs (config, code, dataset versions)
    promotion: Promotion | None = None  # a succeeded run's effect on its config name's champion
    gpu_node_seconds: float | None = None  # GPU nodes x seconds held, from submission to release
    cost: float | None = None  # gpu_node_seconds at the configured price per node-hour
    queue_position: int | None = None  # 1-based place in its RayCluster's queue while QUEUED
    cancel_requested: bool = False
    cancel_reason: str | None = None  # who or what asked, e.g. "interrupted (SIGINT)"
    settled: bool = False  # terminal and its run-finished event published
    generation: int = Field(0, exclude=True)  # GCS generation this copy was read at

    @model_validator(mode="before")
    @classmethod
    def unversioned_is_format_1(cls, data: Any) -> Any:
        if isinstance(data, dict) and "format" not in data:
            return {**data, "format": 1}
        return data

    @field_serializer("format")
    def written_as_current(self, _: int) -> int:
        return RECORD_FORMAT  # what this release writes is its own format (newer records are never written)

    def run_config(self) -> RunConfig:
        """The run's accepted config (never rejected now for a rule added since it was accepted)."""
        if self.config is None:
            raise ValueError(f"{self.run_id}: a {self.state.value} record has no accepted config")
        return stored_config(self.config)

    def moved(self, state: State, now: dt.datetime, reason: str | None = None, **changes: Any) -> RunRecord:
        """This record in `state` (the same state: only `reason` and `changes` are updated)."""
        if state != self.state and state not in ALLOWED.get(self.state, frozenset()):
            raise InvalidTransition(f"{self.run_id}: {self.state.value} -> {state.value}")
        history = (
            self.history if state == self.state else [*self.history, Transition(state=state, at=now, reason=reason)]
        )
        keep_reason = state == self.state and reason is None
        return self.model_copy(
            update={
                "state": state,
                "updated_at": now,
                "history": history,
                "reason": self.reason if keep_reason else reason,
                **changes,
            }
        )

    def entered(self, state: State) -> dt.datetime | None:
        """When the run last entered `state`, if it ever did."""
        return next((t.at for t in reversed(self.history) if t.state == state), None)

    def left(self, state: State) -> dt.datetime | None:
        """When the run last moved on from `state`, if it ever did."""
        following = None
        for t in reversed(self.history):
            if t.state == state:
                return following
            following = t.at
        return None

    @property
    def cancel_why(self) -> str:
        return self.cancel_reason or "cancelled on request"

    @property
    def nightly(self) -> bool:
        return self.source.get("kind") == "nightly"

    @property
    def may_hold_nodes(self) -> bool:
        """Any accepted run may hold worker nodes or a place in line until it is released; a rejected or
        skipped run never asked for any."""
        return self.state not in (State.REJECTED, State.SKIPPED) and self.config is not None

    @property
    def reached_cluster(self) -> bool:
        """Whether the run was ever submitted, so counted towards its RayCluster's workers."""
        return self.entered(State.SUBMITTED) is not None
