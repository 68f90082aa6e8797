"""Run records: one JSON object per run in the bucket (`runs/<run_id>.json`), moved through a state
machine with compare-and-swap writes (GCS generation preconditions), so concurrent and duplicate
handlers never overwrite each other.

    RECEIVED -> REJECTED
    RECEIVED -> PROVISIONING -> SUBMITTED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
    (any live state) -> FAILED | CANCELLED

A marker `runs/active/<run_id>` lists the runs the watcher must still look at; it goes once a run
is terminal and its run-finished event is out (`settled`).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, Field

from functions.retry import TransientError


class State(str, enum.Enum):
    RECEIVED = "RECEIVED"
    REJECTED = "REJECTED"
    PROVISIONING = "PROVISIONING"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = {State.REJECTED, State.SUCCEEDED, State.FAILED, State.CANCELLED}
ALLOWED = {
    State.RECEIVED: {State.REJECTED, State.PROVISIONING, State.SUBMITTED, State.FAILED, State.CANCELLED},
    State.PROVISIONING: {State.SUBMITTED, State.FAILED, State.CANCELLED},
    State.SUBMITTED: {State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED},
    State.RUNNING: {State.SUCCEEDED, State.FAILED, State.CANCELLED},
}


class InvalidTransition(Exception):
    pass


class Transition(BaseModel):
    state: State
    at: dt.datetime
    reason: str | None = None


class RunRecord(BaseModel):
    run_id: str
    state: State
    source: dict[str, str]  # kind (upload | message | nightly) and ref (gs:// URI or message id)
    created_at: dt.datetime
    updated_at: dt.datetime
    config: dict[str, Any] | None = None  # the validated config, storage resolved
    raw_config: str | None = None  # kept for rejected configs only, redacted and truncated
    reason: str | None = None
    errors: list[str] = []
    history: list[Transition] = []
    job: dict[str, Any] | None = None  # last RayJob status seen
    result: dict[str, Any] | None = None  # the trainer's result.json: checkpoints and metrics
    cancel_requested: bool = False
    settled: bool = False  # terminal and its run-finished event published
    generation: int = Field(0, exclude=True)  # GCS generation this copy was read at

    def moved(self, state: State, now: dt.datetime, reason: str | None = None, **changes) -> RunRecord:
        if state != self.state and state not in ALLOWED.get(self.state, set()):
            raise InvalidTransition(f"{self.run_id}: {self.state.value} -> {state.value}")
        history = self.history if state == self.state else [*self.history, Transition(state=state, at=now, reason=reason)]
        return self.model_copy(update={"state": state, "updated_at": now, "history": history,
                                       "reason": reason if state != self.state or reason is not None else self.reason,
                                       **changes})


class Conflict(Exception):
    """The object changed since it was read (HTTP 412 on a generation precondition)."""


class Contended(TransientError):
    """A record kept changing under a read-modify-write: worth another try later, not a failure."""


class Blobs(Protocol):
    """The bucket operations the store needs (functions/gcs.py)."""

    def read(self, path: str) -> tuple[bytes, int] | None: ...
    def write(self, path: str, data: bytes, if_generation_match: int) -> int: ...
    def delete(self, path: str) -> None: ...
    def list(self, prefix: str) -> list[str]: ...
    def listing(self, prefix: str) -> list[tuple[str, dt.datetime]]: ...


RECORDS = "runs/"
ACTIVE = "runs/active/"
ORPHAN_AFTER = dt.timedelta(minutes=10)


class RunStore:
    def __init__(self, blobs: Blobs):
        self.blobs = blobs

    def get(self, run_id: str) -> RunRecord | None:
        found = self.blobs.read(f"{RECORDS}{run_id}.json")
        if found is None:
            return None
        data, generation = found
        record = RunRecord.model_validate_json(data)
        record.generation = generation
        return record

    def create(self, record: RunRecord) -> tuple[RunRecord, bool]:
        """Write a new record unless one exists; returns (the stored record, whether this call created it)."""
        try:
            return self._write(record, if_generation_match=0), True
        except Conflict:
            existing = self.get(record.run_id)
            if existing is None:  # deleted in between: vanishingly rare, try once more
                return self._write(record, if_generation_match=0), True
            return existing, False

    def put(self, record: RunRecord) -> RunRecord:
        """Replace the record if nobody wrote it since it was read, else raise Conflict."""
        return self._write(record, if_generation_match=record.generation)

    def update(self, run_id: str, change: Callable[[RunRecord], RunRecord | None], attempts: int = 8) -> RunRecord | None:
        """Read-modify-write with CAS: `change` sees the latest record and returns the new one (None: no change)."""
        for _ in range(attempts):
            current = self.get(run_id)
            if current is None:
                return None
            new = change(current)
            if new is None:
                return current
            try:
                return self.put(new)
            except Conflict:
                continue
        raise Contended(f"{run_id}: still contended after {attempts} attempts")

    def _write(self, record: RunRecord, if_generation_match: int) -> RunRecord:
        data = record.model_dump_json(indent=2).encode()
        generation = self.blobs.write(f"{RECORDS}{record.run_id}.json", data, if_generation_match)
        return record.model_copy(update={"generation": generation})

    def mark_active(self, run_id: str) -> None:
        try:
            self.blobs.write(f"{ACTIVE}{run_id}", b"", if_generation_match=0)
        except Conflict:
            pass  # already marked

    def unmark_active(self, run_id: str) -> None:
        self.blobs.delete(f"{ACTIVE}{run_id}")

    def active(self, now: dt.datetime | None = None) -> list[RunRecord]:
        """Records the watcher still has to look at, oldest first. Given `now`, a marker whose record never
        came (its launch died between the two writes and was not redelivered) is dropped once it is old:
        a redelivery marks the run again before it writes the record."""
        records = []
        for path, created in self.blobs.listing(ACTIVE):
            record = self.get(path.removeprefix(ACTIVE))
            if record is not None:
                records.append(record)
            elif now is not None and now - created > ORPHAN_AFTER:
                self.blobs.delete(path)
        return sorted(records, key=lambda r: r.created_at)

