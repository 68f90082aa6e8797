"""The run-record store: records in a bucket, written with generation preconditions (compare-and-swap),
so concurrent and duplicate handlers never overwrite each other."""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

from functions.core.allocation import Allocation, key_path
from functions.core.config import ClusterSpec
from functions.core.errors import Conflict, Contended
from functions.core.runs import RunRecord

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class Blobs(Protocol):
    """The bucket operations the store needs (functions/adapters/gcs.py)."""

    def read(self, path: str) -> tuple[bytes, int] | None: ...
    def write(self, path: str, data: bytes, if_generation_match: int) -> int: ...
    def delete(self, path: str) -> None: ...
    def list(self, prefix: str) -> list[str]: ...
    def listing(self, prefix: str) -> builtins.list[tuple[str, dt.datetime]]: ...


RECORDS = "runs/"
ACTIVE = "runs/active/"
QUARANTINE = "quarantine/runs/"  # outside runs/: never listed as a record again
EVENT_CLAIMS = "events/claims/"  # one object per run and state: who publishes its run-finished event
STALE_CLAIM = dt.timedelta(minutes=5)
ORPHAN_AFTER = dt.timedelta(minutes=10)
ALLOCATIONS = "clusters/"


def compare_and_swap(
    read: Callable[[], T | None], write: Callable[[T], T], change: Callable[[T], T | None], what: str, attempts: int = 8
) -> T | None:
    """Read-modify-write: `change` sees the latest value and returns the new one (None: no change);
    `write` raises Conflict when someone wrote in between, and the change is made again on what they wrote."""
    for _ in range(attempts):
        current = read()
        if current is None:
            return None
        new = change(current)
        if new is None:
            return current
        try:
            return write(new)
        except Conflict:
            continue
    raise Contended(f"{what}: still contended after {attempts} attempts")


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

    def update(
        self, run_id: str, change: Callable[[RunRecord], RunRecord | None], attempts: int = 8
    ) -> RunRecord | None:
        """Read-modify-write with CAS: `change` sees the latest record and returns the new one (None: no change)."""
        return compare_and_swap(lambda: self.get(run_id), self.put, change, run_id, attempts)

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

    def active(
        self, now: dt.datetime | None = None, quarantined: builtins.list[tuple[str, str]] | None = None
    ) -> builtins.list[RunRecord]:
        """Records the watcher still has to look at, oldest first. Given `now`, a marker whose record never
        came (its launch died between the two writes and was not redelivered) is dropped once it is old:
        a redelivery marks the run again before it writes the record. A record that cannot be read as one
        is moved aside (`quarantined` gets its run id and why) so it cannot stall every other run."""
        records = []
        for path, created in self.blobs.listing(ACTIVE):
            run_id = path.removeprefix(ACTIVE)
            try:
                record = self.get(run_id)
            except ValueError as err:  # corrupt JSON or not a record (pydantic's ValidationError is one)
                why = str(err).splitlines()[0][:300]
                self.quarantine(run_id, why)
                if quarantined is not None:
                    quarantined.append((run_id, why))
                continue
            if record is not None:
                records.append(record)
            elif now is not None and now - created > ORPHAN_AFTER:
                self.blobs.delete(path)
        return sorted(records, key=lambda r: r.created_at)

    def claim_event(self, run_id: str, state: str, now: dt.datetime) -> bool:
        """Whether this caller publishes the run's event for `state`: the first to create the claim does;
        a claim whose publisher died before settling the run (older than STALE_CLAIM) is taken over."""
        path = f"{EVENT_CLAIMS}{run_id}.{state}"
        try:
            self.blobs.write(path, now.isoformat().encode(), if_generation_match=0)
            return True
        except Conflict:
            pass
        found = self.blobs.read(path)
        if found is None:
            return False
        claimed_at = dt.datetime.fromisoformat(found[0].decode())
        if now - claimed_at < STALE_CLAIM:
            return False
        try:
            self.blobs.write(path, now.isoformat().encode(), if_generation_match=found[1])
            return True
        except Conflict:
            return False

    def quarantine(self, run_id: str, why: str) -> None:
        """Move an unreadable record aside (kept for a person to look at) and stop watching it."""
        found = self.blobs.read(f"{RECORDS}{run_id}.json")
        if found is not None:
            try:
                self.blobs.write(f"{QUARANTINE}{run_id}.json", found[0], if_generation_match=0)
            except Conflict:
                pass  # moved aside before
            self.blobs.delete(f"{RECORDS}{run_id}.json")
        self.unmark_active(run_id)


class Allocations:
    """The per-RayCluster allocation objects (functions/core/allocation.py), changed only by CAS."""

    def __init__(self, blobs: Blobs):
        self.blobs = blobs

    def _read(self, path: str) -> Allocation | None:
        found = self.blobs.read(path)
        if found is None:
            return None
        alloc = Allocation.model_validate_json(found[0])
        alloc.generation = found[1]
        return alloc

    def get(self, cluster: ClusterSpec) -> Allocation | None:
        return self._read(key_path(cluster))

    def _write(self, alloc: Allocation) -> Allocation:
        data = alloc.model_dump_json(indent=2).encode()
        generation = self.blobs.write(key_path(alloc.cluster), data, if_generation_match=alloc.generation)
        return alloc.model_copy(update={"generation": generation})

    def update(self, cluster: ClusterSpec, change: Callable[[Allocation], Allocation | None]) -> Allocation:
        """CAS-change the RayCluster's allocation (an empty one when it has none yet); returns it as stored."""
        updated = compare_and_swap(
            lambda: self.get(cluster) or Allocation(cluster=cluster), self._write, change, key_path(cluster)
        )
        assert updated is not None
        return updated

    def all(self) -> builtins.list[Allocation]:
        """Every RayCluster the controller ever sized (unreadable objects are skipped: a person looks)."""
        found = []
        for path in self.blobs.list(ALLOCATIONS):
            try:
                alloc = self._read(path)
            except ValueError:
                continue
            if alloc is not None:
                found.append(alloc)
        return found


class Pointers(Generic[M]):
    """Small named JSON objects changed only by compare-and-swap: the champion of each config name
    (functions/core/champion.py), the last successful nightly's inputs (functions/core/fingerprint.py)."""

    def __init__(self, blobs: Blobs, model: type[M], path: Callable[[str], str], attempts: int = 8):
        self.blobs, self.model, self.path, self.attempts = blobs, model, path, attempts

    def get(self, name: str) -> M | None:
        found = self.blobs.read(self.path(name))
        if found is None:
            return None
        pointer = self.model.model_validate_json(found[0])
        pointer.generation = found[1]  # type: ignore[attr-defined]
        return pointer

    def swap(self, name: str, change: Callable[[M | None], M | None]) -> M | None:
        """`change` sees the pointer as stored (None: none yet) and returns its successor (None: keep it);
        made again on the newer pointer when another writer got in between. Returns the pointer as stored."""
        for _ in range(self.attempts):
            current = self.get(name)
            new = change(current)
            if new is None:
                return current
            data = new.model_dump_json(indent=2).encode()
            try:
                generation = self.blobs.write(self.path(name), data, if_generation_match=_generation(current))
            except Conflict:
                continue
            return new.model_copy(update={"generation": generation})
        raise Contended(f"{self.path(name)}: still contended after {self.attempts} attempts")


def _generation(pointer: BaseModel | None) -> int:
    return 0 if pointer is None else int(getattr(pointer, "generation", 0))
