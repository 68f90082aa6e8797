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

    SUBMITTED | RUNNING ──► QUEUED: the attempt lost its nodes (preempted, node gone); the next attempt
                             resumes from the last checkpoint, up to scaling.max_attempts
    SUBMITTED ──► QUEUED: its nodes did not come within deadlines.region_seconds; the same attempt moves to the
                          next of its regions (functions/core/regions.py)
    FAILED | CANCELLED ──► QUEUED: `raytune retry` started a new attempt by hand

A marker `runs/active/<run_id>` lists the runs the watcher must still look at; it goes once a run
is terminal and its run-finished event is out (`settled`).
"""

from __future__ import annotations

import datetime as dt
import enum
import itertools
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, SerializerFunctionWrapHandler, model_serializer, model_validator

from functions.core.champion import Promotion
from functions.core.config import RunConfig, stored_config
from functions.core.errors import RetryRefused, Unreadable
from functions.core.estimate import Estimate
from functions.core.fingerprint import Inputs
from functions.core.platform import NodeSeen
from functions.core.regions import Placement, placed
from functions.core.release import (
    ACCEPTED_READER,
    Stamped,
    extended,
    extensions,
    extensions_by_release,
    known_extensions,
    readable,
)
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
    State.SUBMITTED: frozenset({State.QUEUED, State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED}),
    State.RUNNING: frozenset({State.QUEUED, State.SUCCEEDED, State.FAILED, State.CANCELLED}),
    State.FAILED: frozenset({State.QUEUED}),
    State.CANCELLED: frozenset({State.QUEUED}),
}
RETRYABLE = frozenset({State.FAILED, State.CANCELLED})  # `raytune retry`: ended runs that did not finish
# Where a next attempt starts, as its reason says it: never a checkpoint the run did not save (the trainer says which).
RESUMES = "from the run's last checkpoint if it saved one"
MAX_ATTEMPTS = 20  # attempts a record may hold, retries by hand included (scaling.max_attempts bounds the automatic)
# Failures no retry changes, as the driver log names them (joblog.clean: the exception type, no module path):
# the preflight's (a dataset, model or GPU driver that cannot work) and the data's own.
REPEATED_CAUSES = ("PreflightError", "DataError")


class Attempt(BaseModel):
    """One submission of the run's job. A run that needed only one has none in its record; the first retry
    writes the first attempt's end and the next one's start."""

    number: int
    job: str  # the RayJob (the Ray job's submission id) of this attempt: the run id, then <run id>-<number>
    requested_at: dt.datetime  # asked for: when its predecessor ended, or when a person retried the run
    by: str  # why it exists: "lost nodes" (automatic) or who retried it by hand
    not_before: dt.datetime | None = None  # resubmitted no earlier (backoff after lost nodes)
    held_since: dt.datetime | None = None  # its nodes held from (kept from the attempt before, or submission)
    submitted_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    outcome: str | None = None  # how it ended: state and reason
    lost: list[str] = []  # what took its nodes (node, when, what Kubernetes or Ray said), when that ended it
    nodes: dict[str, str] = {}  # the nodes it ran on, each with the capacity it came from (spot, ...)
    gpu_node_seconds: float | None = None
    cost: float | None = None  # its GPU node-seconds at the price of its nodes' capacity


def job_name(run_id: str, number: int) -> str:
    return run_id if number == 1 else f"{run_id}-{number}"


class InvalidTransition(Exception):
    """A move the state machine does not allow: a bug in a decision, never silently dropped."""


class Transition(BaseModel):
    state: State
    at: dt.datetime
    reason: str | None = None


# The newest record format this release acts on. 1: the releases before formats were versioned (no `format`
# field); 2: adds `format` (and sources may carry a cancel digest); 3: a run with a sweep (its config's `sweep`
# section), which a release before sweeps could neither run nor rewrite: it reads it as a newer release's and leaves
# it alone; 4: a run that may move between regions with those fields in its `config`, as release 0.2.0 wrote it
# (the releases before regions quarantined it). This release writes no format 4: what older releases do not read
# goes into `accepted_config` beside a `config` they do (functions/core/release.py), and the format is the one that
# `config` needs. Older formats are read as they are (their configs by the rules they were accepted under:
# config.stored_config); a newer one belongs to a newer release, and this one leaves it alone rather than rewrite it
# without the fields it does not know.
RECORD_FORMAT = 4
SWEEP_FORMAT = 3
PLAIN_FORMAT = 2  # a record without a sweep or regions, as the release before sweeps wrote it


def format_of(config: dict[str, Any] | None) -> int:
    """The format a record whose `config` is this is written in: the oldest that knows everything in it."""
    if not config:
        return PLAIN_FORMAT
    cluster, scaling, deadlines = (config.get(k) or {} for k in ("cluster", "scaling", "deadlines"))
    if (
        cluster.get("fallback_regions")
        or deadlines.get("region_seconds")
        or any(o.get("region") for o in scaling.get("capacity") or [])
    ):
        return RECORD_FORMAT
    return SWEEP_FORMAT if config.get("sweep") else PLAIN_FORMAT


class RunRecord(Stamped, BaseModel):
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
    estimate: Estimate | None = None  # what it was expected to take and cost before launch (core/estimate.py)
    queue_position: int | None = None  # 1-based place in its RayCluster's queue while QUEUED
    attempts: list[Attempt] = []  # when the job was submitted more than once: each submission, oldest first
    nodes: dict[str, str] = {}  # the current attempt's nodes, each with the capacity it came from
    # The same nodes' identities as first seen under the run (disruption.identity): a node made again or booted
    # again under its name since then lost what it ran. Absent from records of releases before it (read as '').
    node_ids: dict[str, str] = {}
    # Where a run that moved between regions waited and ran, oldest first (the last is where it is now); none written
    # for a run that never moved (its region is its config's cluster.region). Left out where empty.
    placements: list[Placement] = Field([], exclude_if=lambda placements: not placements)
    # Where an ended run's time went (seconds): in each state it passed through (attempts summed), then the job's
    # own phases from its result ("job: loading the model", ...). Written when it ends.
    timings: dict[str, float] = {}
    # RECEIVED belongs to the launch handler that created it (functions/core/decide.py); one that failed gives it
    # back so the platform's redelivery of its event takes the run over at once instead of after the claim's expiry.
    claim_released: bool = False
    cancel_requested: bool = False
    cancel_reason: str | None = None  # who or what asked, e.g. "interrupted (SIGINT)"
    settled: bool = False  # terminal and its run-finished event published
    generation: int = Field(0, exclude=True)  # GCS generation this copy was read at
    _validated: tuple[dict[str, Any], RunConfig] | None = PrivateAttr(None)  # run_config() of `config`
    _placed: tuple[RunConfig, str, RunConfig] | None = PrivateAttr(None)  # run_config(): accepted, region, placed

    @model_validator(mode="before")
    @classmethod
    def as_stored(cls, data: Any) -> Any:
        """A record without `format` is format 1; one whose accepted config was written beside the config that
        older releases read (release.readable) is the run as accepted."""
        if not isinstance(data, dict):
            return data
        if "format" not in data:
            data = {**data, "format": 1}
        if data.get("accepted_config") is not None:
            data = {**data, "config": data["accepted_config"]}
        if isinstance(data.get("config_extensions"), dict) and isinstance(data.get("config"), dict):
            data = {**data, "config": extended(data["config"], data["config_extensions"])}
        if isinstance(data.get("config_extensions_by_release"), dict) and isinstance(data.get("config"), dict):
            data = {**data, "config": extended(data["config"], known_extensions(data["config_extensions_by_release"]))}
        return data

    @model_serializer(mode="wrap")
    def as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Written so that every release from release.OLDEST_READER on reads and acts on it: `config` is the run's
        config as placed where it is now, without the fields they do not know, and the accepted config goes beside
        it where it differs; the format is the one that `config` needs."""
        data: dict[str, Any] = handler(self)
        if self.config is not None:
            config = self.readable_config()
            data["config"] = config
            if config != self.config:
                # What ACCEPTED_READER and later read in place of `config`: no field they do not know either.
                data["accepted_config"] = readable(self.config, ACCEPTED_READER)
                if newer := extensions(self.config):
                    data["config_extensions"] = newer
                if later := extensions_by_release(self.config):
                    data["config_extensions_by_release"] = later
        data["format"] = format_of(data.get("config"))
        return data

    def readable_config(self) -> dict[str, Any]:
        """The config as older releases read it: placed in the run's region now, without the newer fields."""
        assert self.config is not None
        cluster, scaling = (self.config.get(k) or {} for k in ("cluster", "scaling"))
        spread = cluster.get("fallback_regions") or any(o.get("region") for o in scaling.get("capacity") or [])
        if not spread and self.region in (None, cluster.get("region")):
            return readable(self.config)  # nothing to place: the document as accepted, not dumped again
        return readable(self.run_config().model_dump(mode="json"))

    @property
    def from_newer_release(self) -> bool:
        """Written by a newer release (a higher format): this one reads it but never rewrites or acts on it."""
        return self.format > RECORD_FORMAT

    @property
    def region(self) -> str | None:
        """Where the run is placed now: its last placement's region, else its config's cluster.region."""
        if self.placements:
            return self.placements[-1].region
        region = (self.config or {}).get("cluster", {}).get("region")
        return str(region) if region else None

    def run_config(self) -> RunConfig:
        """The run's accepted config (never rejected now for a rule added since it was accepted), validated once
        per config and placed once per region (a tick asks for it at every step of every run), as applied in the
        region the run is in now (regions.placed: its cluster there and the capacity offered there)."""
        accepted = self.accepted_config()
        region = self.region or accepted.cluster.region
        found = self._placed
        if found is None or found[0] is not accepted or found[1] != region:  # placed anew only when either moved
            found = self._placed = (accepted, region, placed(accepted, region))
        return found[2]

    def accepted_config(self) -> RunConfig:
        """The run's config as accepted, in its first region."""
        if self.config is None:
            raise Unreadable(f"{self.run_id}: a {self.state.value} record has no accepted config")
        validated = self._validated
        if validated is None or validated[0] is not self.config:  # copies with another config validate theirs
            try:
                validated = self._validated = (self.config, stored_config(self.config))
            except ValueError as err:  # pydantic's ValidationError: not a config by any rules
                raise Unreadable(f"{self.run_id}: its config is not one by any rules: {err}") from err
        return validated[1]

    def moved(self, state: State, now: dt.datetime, reason: str | None = None, **changes: Any) -> RunRecord:
        """This record in `state` (the same state: only `reason` and `changes` are updated)."""
        if state != self.state and state not in ALLOWED.get(self.state, frozenset()):
            raise InvalidTransition(f"{self.run_id}: {self.state.value} -> {state.value}")
        history = (
            self.history if state == self.state else [*self.history, Transition(state=state, at=now, reason=reason)]
        )
        keep_reason = state == self.state and reason is None
        moved = self.model_copy(
            update={
                "state": state,
                "updated_at": now,
                "history": history,
                "reason": self.reason if keep_reason else reason,
                **changes,
            }
        )
        if state.terminal:
            moved.timings = moved.timeline()
        return moved

    def timeline(self) -> dict[str, float]:
        """Seconds in each state the run passed through, in order (a state entered again adds to its sum), and
        the job's own phases as its result reports them."""
        spans: dict[str, float] = {}
        for entered, left in itertools.pairwise(self.history):
            spans[entered.state.value] = round(
                spans.get(entered.state.value, 0.0) + (left.at - entered.at).total_seconds(), 2
            )
        job = self.result.timings if self.result is not None else {}
        return {**spans, **{f"job: {phase}": seconds for phase, seconds in job.items()}}

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
    def current(self) -> Attempt:
        """The current attempt. A run on its first has none written (its record and run-finished event stay as
        every release writes them): it is derived here, so every reader has one."""
        if self.attempts:
            return self.attempts[-1]
        submitted = self.entered(State.SUBMITTED)
        if submitted is not None and self.placements and self.placements[-1].since > submitted:
            submitted = None  # moved to another region since: not submitted there yet
        return Attempt(
            number=1,
            job=self.run_id,
            requested_at=self.created_at,
            by=self.source.get("kind", "launch"),
            held_since=submitted,
            submitted_at=submitted,
        )

    @property
    def seen_nodes(self) -> dict[str, NodeSeen]:
        """The current attempt's nodes as the watcher saw them: capacity and identity."""
        return {name: NodeSeen(capacity, self.node_ids.get(name, "")) for name, capacity in self.nodes.items()}

    @property
    def attempt(self) -> int:
        return self.current.number

    @property
    def job_name(self) -> str:
        """The current attempt's RayJob."""
        return self.current.job

    @property
    def arrived(self) -> dt.datetime:
        """When the current attempt was asked for: queue and pending deadlines count from here."""
        return self.current.requested_at

    @property
    def submitted_at(self) -> dt.datetime | None:
        """When the current attempt's job was applied."""
        return self.current.submitted_at

    def next_attempt(self, now: dt.datetime, by: str, not_before: dt.datetime | None, keeps_nodes: bool) -> Attempt:
        number = self.attempt + 1
        return Attempt(
            number=number,
            job=job_name(self.run_id, number),
            requested_at=now,
            by=by,
            not_before=not_before,
            held_since=now if keeps_nodes else None,
        )

    def closed_attempts(
        self, now: dt.datetime, outcome: str, lost: list[str], gpu_node_seconds: float
    ) -> list[Attempt]:
        """The attempts with the current one ended (the first one written out if the record had none)."""
        current = self.current
        ended = current.model_copy(
            update={
                "ended_at": now,
                "outcome": outcome,
                "lost": lost,
                "nodes": self.nodes,
                "gpu_node_seconds": gpu_node_seconds,
            }
        )
        return [*self.attempts[:-1], ended]

    def fails_again(self) -> str | None:
        """Why a retry of this run would fail the same way (its job ended on what no retry changes: the data, the
        model, a driver the preflight refused), or None. `raytune retry` asks for --force before repeating it."""
        reason = self.reason or ""
        cause = next((c for c in REPEATED_CAUSES if f"{c}:" in reason), None)
        if self.state != State.FAILED or cause is None:
            return None
        return (
            f"{self.run_id} failed on {cause} ({reason[:200]}); a retry meets it again unless the data or image changed"
        )

    def retried(self, now: dt.datetime, by: str) -> RunRecord:
        """This ended run as the next attempt, asked for by hand (`raytune retry`): QUEUED for its nodes again,
        resuming from its last checkpoint. RetryRefused says why a run cannot be retried."""
        if self.state not in RETRYABLE:
            raise RetryRefused(
                f"{self.run_id} is {self.state.value}: only a FAILED or CANCELLED run can be retried"
                + (" (submit its config again for a new run)" if self.state == State.SUCCEEDED else "")
            )
        if not self.settled:
            raise RetryRefused(f"{self.run_id} ended moments ago and its end is still being published: retry shortly")
        if self.attempt >= MAX_ATTEMPTS:
            raise RetryRefused(f"{self.run_id} had {self.attempt} attempts, the most a run may have")
        ended = self.entered(self.state) or self.updated_at
        attempts = self.attempts or self.closed_attempts(
            ended, f"{self.state.value}: {self.reason or ''}".rstrip(": "), [], self.gpu_node_seconds or 0.0
        )
        closed = self.model_copy(update={"attempts": attempts})
        attempt = closed.next_attempt(now, by, not_before=None, keeps_nodes=False)
        return closed.model_copy(
            update={
                "attempts": [*attempts, attempt],
                "settled": False,
                "cancel_requested": False,
                "cancel_reason": None,
                "result": None,
                "promotion": None,
                "job": None,
                "nodes": {},
                "node_ids": {},
            }
        ).moved(
            State.QUEUED,
            now,
            f"attempt {attempt.number} asked for by {by}: {RESUMES}",
        )

    @property
    def earlier_gpu_node_seconds(self) -> float:
        """GPU node-seconds of the attempts that ended before the current one."""
        return sum(a.gpu_node_seconds or 0.0 for a in self.attempts[:-1])

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
