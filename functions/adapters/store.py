"""The run-record store and the controller's other state in its bucket, all written with generation
preconditions (compare-and-swap), so concurrent and duplicate handlers never overwrite each other."""

from __future__ import annotations

import builtins
import datetime as dt
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel

from functions.adapters.gcs import Listed
from functions.core import joblog, quiet
from functions.core.allocation import ALLOCATIONS, Allocation, key_path, spec_of
from functions.core.config import ClusterSpec
from functions.core.errors import Conflict, Contended, NewerRelease, Unreadable, race_pause
from functions.core.runs import RunRecord

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


class Blobs(Protocol):
    """The bucket operations the store needs (functions/adapters/gcs.py)."""

    def read(self, path: str, *, limit: int | None = None) -> tuple[bytes, int] | None: ...
    def write(
        self, path: str, data: bytes, if_generation_match: int, metadata: dict[str, str] | None = None
    ) -> int: ...
    def copy(self, source: str, destination: str) -> None: ...
    def delete(self, path: str) -> None: ...
    def list(self, prefix: str) -> list[str]: ...
    def listing(self, prefix: str) -> builtins.list[Listed]: ...


RECORDS = "runs/"
ACTIVE = "runs/active/"
QUARANTINE_ROOT = "quarantine/"  # what cannot be read is moved under it
QUARANTINE = f"{QUARANTINE_ROOT}runs/"  # outside runs/: never listed as a record again
EVENT_CLAIMS = "events/claims/"  # one object per attempt and state: who publishes its run-finished event
STALE_CLAIM = dt.timedelta(minutes=5)
ORPHAN_AFTER = dt.timedelta(minutes=10)
QUARANTINED_ALLOCATIONS = "quarantine/clusters/"
LOGS = "logs/"  # logs/<run id>/<job>.log: each attempt's driver log, kept when it ends
MAX_LOG_BYTES = joblog.KEPT_LOG_BYTES
# No stored object of the controller's is near this (a record with its result and history is tens of KiB): a
# larger one was put there by someone else, and is never read into memory whole (the watcher has 512 MiB).
MAX_STORED_BYTES = 4 * 1024 * 1024
# An active run's marker carries its record's generation as last written (custom metadata), so the tick's one
# listing of the markers tells which records changed since this process read them: only those are read again.
# A quiet run's marker carries more: its note (functions/core/quiet.py), which spares every process the read.
RECORD_GENERATION = "record-generation"
RECHECK_S = 300.0  # a record served from memory is read again after this long (a writer that died between
# writing a record and noting it on the marker leaves the marker behind: at most this long); a note needs no recheck
WRITE_OUTLIVES = dt.timedelta(minutes=5)  # longer than any record write (its retries included) takes
PARALLEL_READS = 16  # records read at once: a hung read holds one thread, not the tick
ALLOCATION_ATTEMPTS = 16  # writes of an allocation a burst of launches contends for (Allocations)
NOTE_ATTEMPTS = 4  # a marker a note keeps losing to others' notes is left to them (each judged again first)


def move_aside(blobs: Blobs, path: str, destination: str) -> None:
    """Keep an unreadable object for a person to look at (copied by the bucket, never through this process's
    memory) where nothing reads it as state again."""
    blobs.copy(path, destination)
    blobs.delete(path)


class Stored(Generic[M]):
    """JSON objects of one model in the bucket, each changed only by compare-and-swap on its generation:
    run records, RayCluster allocations (functions/core/allocation.py), the champion of each config name
    (functions/core/champion.py), the last successful nightly's inputs (functions/core/fingerprint.py)."""

    def __init__(
        self,
        blobs: Blobs,
        model: type[M],
        path: Callable[[str], str],
        attempts: int = 8,
        written: Callable[[str, M], None] | None = None,
        replacing: Callable[[str, M], None] | None = None,
        pause: Callable[[float], None] | None = None,
    ):
        self.blobs, self.model, self.path, self.attempts = blobs, model, path, attempts
        self.pause = pause  # given: a writer that lost a swap tries again after errors.race_pause
        self.written = written  # told of every object this store wrote, with its new generation
        self.replacing = replacing  # told of the object a swap is about to replace, before its write

    def get(self, key: str) -> M | None:
        """The object with the generation it was read at; None when absent, Unreadable when unreadable or
        larger than any the controller writes (only MAX_STORED_BYTES + 1 bytes are ever downloaded)."""
        found = self.blobs.read(self.path(key), limit=MAX_STORED_BYTES)
        if found is None:
            return None
        if len(found[0]) > MAX_STORED_BYTES:
            raise Unreadable(f"{self.path(key)} is larger than {MAX_STORED_BYTES} bytes: not one the controller wrote")
        try:
            stored = self.model.model_validate_json(found[0])
        except ValueError as err:  # pydantic's ValidationError: not JSON, or not this model
            raise Unreadable(str(err)) from err
        stored.generation = found[1]  # type: ignore[attr-defined]
        return stored

    def write(self, key: str, new: M, if_generation_match: int, told: bool = True) -> M:
        """Write `new` if the stored generation is still `if_generation_match` (0: absent), else Conflict.
        `told`: whether `written` hears of it."""
        generation = self.blobs.write(self.path(key), new.model_dump_json(indent=2).encode(), if_generation_match)
        stored = new.model_copy(update={"generation": generation})
        if self.written is not None and told:
            self.written(key, stored)
        return stored

    def swap(
        self, key: str, change: Callable[[M | None], M | None], attempts: int | None = None, known: M | None = None
    ) -> M | None:
        """Read-modify-write: `change` sees the object as stored (None: absent) and returns its successor
        (None: keep it); made again on what another writer wrote in between. Returns the object as stored.
        `known`: the object as the caller last read or wrote it, tried first instead of a read; its generation
        makes a stale copy's write fail, and the change is then made again on the stored one, as is a "keep it"
        said on the copy."""
        guess = known
        for attempt in range(attempts or self.attempts):
            if attempt and self.pause is not None and guess is None:
                self.pause(race_pause(attempt))
            current = self.get(key) if guess is None else guess
            new = change(current)
            if new is not None:
                if current is not None and self.replacing is not None:
                    self.replacing(key, current)
                try:
                    return self.write(key, new, if_generation_match=_generation(current))
                except Conflict:
                    pass
            elif guess is None:
                return current
            guess = None  # the stored object decides from here on
        raise Contended(f"{self.path(key)}: still contended after {attempts or self.attempts} attempts")


def _ours(record: RunRecord) -> RunRecord:
    """The record, if this release may rewrite it (its format is this release's or older)."""
    if record.from_newer_release:
        raise NewerRelease(f"{record.run_id}: a format {record.format} record (a newer release's): left to it")
    return record


def _writing(marker: Listed) -> bool:
    """Whether a writer took the marker's note off for a write that may still be under way."""
    writing = quiet.writing_since(marker.metadata)
    return writing is not None and dt.datetime.now(dt.UTC) - writing < WRITE_OUTLIVES


def _generation(stored: BaseModel | None) -> int:
    return 0 if stored is None else int(getattr(stored, "generation", 0))


class Remembered(NamedTuple):
    record: RunRecord
    read_at: float  # time.monotonic()


class RunStore:
    """Run records and their markers. A marker's quiet note (functions/core/quiet.py) is kept true by two rules:
    a writer takes the note off (a rewrite of the marker on the generation it saw) before it replaces a record
    that has one, and a note is only ever put on the marker generation its writer saw before it wrote or read the
    record it describes. So a note that is on a marker describes the record as stored, even when a writer dies
    between its two writes or two writers race."""

    def __init__(self, blobs: Blobs):
        self.blobs = blobs
        self.records = Stored(
            blobs,
            RunRecord,
            lambda run_id: f"{RECORDS}{run_id}.json",
            written=self._written,
            replacing=self._replacing,
        )
        # The active records as this process last read or wrote them: a quiet tick reads none (active()).
        self.remembered: dict[str, Remembered] = {}
        self.markers: dict[str, Listed] = {}  # each active run's marker as this process last listed or wrote it
        self.recalled: set[str] = set()  # the runs whose records the last watched()/records_of served from memory

    def get(self, run_id: str) -> RunRecord | None:
        """The record stored as runs/<run_id>.json; Unreadable when it is not one, or names another run (read by
        its object name only: a record claiming another id would otherwise be acted on under that id)."""
        record = self.records.get(run_id)
        if record is not None and record.run_id != run_id:
            raise Unreadable(f"the record inside names run {record.run_id[:100]!r}, not {run_id!r}")
        return record

    def create(self, record: RunRecord, noted: bool = True) -> tuple[RunRecord, bool]:
        """Write a new record unless one exists; returns (the stored record, whether this call created it).
        `noted=False` leaves its generation off its marker: right only for a marker this caller has just made,
        which notes nothing, so every watcher reads the record (active())."""
        try:
            return self.records.write(record.run_id, record, if_generation_match=0, told=noted), True
        except Conflict:
            existing = self.get(record.run_id)
            if existing is None:  # deleted in between: vanishingly rare, try once more
                return self.records.write(record.run_id, record, if_generation_match=0), True
            return existing, False

    def put(self, record: RunRecord) -> RunRecord:
        """Replace the record if nobody wrote it since it was read, else raise Conflict (NewerRelease for one of a
        newer release: no path of this one downgrades it). `record`: the record as read with details changed, not
        its state (a change of state goes through update, which sees the record it replaces)."""
        _ours(record)
        self._replacing(record.run_id, record)
        return self.records.write(record.run_id, record, if_generation_match=record.generation)

    def update(
        self,
        run_id: str,
        change: Callable[[RunRecord], RunRecord | None],
        attempts: int = 8,
        known: RunRecord | None = None,
    ) -> RunRecord | None:
        """Read-modify-write with CAS: `change` sees the latest record and returns the new one (None: no change);
        None when there is no record. `known`: the record as last read or written (Stored.swap)."""
        return self.records.swap(
            run_id, lambda record: None if record is None else change(_ours(record)), attempts, known
        )

    def _written(self, run_id: str, record: RunRecord) -> None:
        """Note the record's new generation, and its quiet note where it has one, on its marker (absent for
        settled runs: nothing is noted). A failed note leaves readers reading the record itself until the marker
        is noted again (active())."""
        if run_id in self.remembered:  # only the active runs this process watches are remembered
            self.remembered[run_id] = Remembered(record, time.monotonic())
        if record.state.terminal:
            # Not noted: an ended run's next write is its settling, which deletes the marker (two marker writes a
            # run saved where 1,000 end in one tick); until then its marker notes no generation, and readers read
            # the record itself, as after any failed note.
            return
        self._note(run_id, record)

    def _note(self, run_id: str, record: RunRecord) -> None:
        """Note the record's generation (and its quiet note, where it has one) on its marker, as a new generation of
        the marker on the one last seen, so a note never lands on a marker another note changed meanwhile. Where
        one did, the record's note goes on only while the record is still at that generation: a writer or reader
        whose note lost the race to a later write's never puts the older generation back (a warm instance would
        then serve its copy of it from memory, an ended run's record left as it was before: issue 51)."""
        note = quiet.noted(record)
        noted = {RECORD_GENERATION: str(record.generation)}
        if note is not None:
            noted[quiet.NOTE] = note.encoded(time.time())
        try:
            for attempt in range(NOTE_ATTEMPTS):
                marker = self.markers.get(run_id) or self._look(run_id)
                if marker is None:
                    return  # settled: nothing to note
                if attempt and (
                    marker.metadata == noted or _writing(marker) or self._stored_generation(run_id) != record.generation
                ):
                    return  # noted as it is, another writer is replacing the record, or a later write's note stands
                try:
                    self._rewrite(marker, noted)
                    return
                except Conflict:
                    self.markers.pop(run_id, None)  # looked up again, and judged again
        except Exception as exc:
            log.warning("%s: cannot note its record's generation on its marker: %s", run_id, exc)

    def _stored_generation(self, run_id: str) -> int | None:
        """The record's generation as stored now, from a listing (its bytes unread)."""
        path = f"{RECORDS}{run_id}.json"
        return next((found.generation for found in self.blobs.listing(path) if found.name == path), None)

    def _replacing(self, run_id: str, current: RunRecord) -> None:
        """Before `current` is replaced: take its quiet note off its marker, if it may have one (a writer that dies
        after its write must not leave the marker describing the record it replaced). On the marker generation last
        seen, looked up again when another writer moved it; Contended when it keeps moving."""
        if quiet.noted(current) is None:
            return
        for _ in range(4):
            marker = self.markers.get(run_id) or self._look(run_id)
            if marker is None:
                return  # not watched: no note to take off
            # no generation either: a process that remembers the record it replaces reads it again
            taken_off = {RECORD_GENERATION: "", quiet.WRITING: dt.datetime.now(dt.UTC).isoformat()}
            try:
                self._rewrite(marker, taken_off)
                return
            except Conflict:
                self.markers.pop(run_id, None)
        raise Contended(f"{ACTIVE}{run_id}: its marker kept changing; its record is not written")

    def _rewrite(self, marker: Listed, metadata: dict[str, str]) -> None:
        """A new generation of the marker with `metadata`, only on the generation seen (Conflict otherwise, and
        when it is gone: nothing brings back a marker its run's settling deleted)."""
        generation = self.blobs.write(marker.name, b"", if_generation_match=marker.generation, metadata=metadata)
        self.markers[marker.name.removeprefix(ACTIVE)] = marker._replace(generation=generation, metadata=metadata)

    def _look(self, run_id: str) -> Listed | None:
        """The run's marker as stored now (for a writer that did not list it)."""
        found = [m for m in self.blobs.listing(f"{ACTIVE}{run_id}") if m.name == f"{ACTIVE}{run_id}"]
        if found:
            self.markers[run_id] = found[0]
        return found[0] if found else None

    def mark_active(self, run_id: str) -> bool:
        """Mark the run for the watcher; whether this call made the marker (False: it was marked already)."""
        try:
            generation = self.blobs.write(f"{ACTIVE}{run_id}", b"", if_generation_match=0)
        except Conflict:
            return False
        self.markers[run_id] = Listed(f"{ACTIVE}{run_id}", dt.datetime.now(dt.UTC), generation, {})
        return True

    def unmark_active(self, run_id: str) -> None:
        self.blobs.delete(f"{ACTIVE}{run_id}")
        self.remembered.pop(run_id, None)
        self.markers.pop(run_id, None)

    def keep_log(self, run_id: str, job: str, text: str) -> None:
        """An ended attempt's driver log, kept after its RayJob (and the submitter pod with its log) is gone: its
        last MAX_LOG_BYTES. Written once; a second writer of the same attempt's log finds it there."""
        data = text.encode()[-MAX_LOG_BYTES:]
        try:
            self.blobs.write(f"{LOGS}{run_id}/{job}.log", data, if_generation_match=0)
        except Conflict:
            pass

    def log(self, run_id: str, job: str) -> str | None:
        found = self.blobs.read(f"{LOGS}{run_id}/{job}.log", limit=MAX_LOG_BYTES)
        return None if found is None else found[0].decode("utf-8", "replace")

    def active(
        self, now: dt.datetime | None = None, quarantined: builtins.list[tuple[str, str]] | None = None
    ) -> builtins.list[RunRecord]:
        """Records the watcher still has to look at, oldest first (watched(), the noted ones read too)."""
        records, notes = self.watched(now, quarantined)
        return sorted(records + self.records_of(notes, now, quarantined), key=lambda r: r.created_at)

    def watched(
        self, now: dt.datetime | None = None, quarantined: builtins.list[tuple[str, str]] | None = None
    ) -> tuple[builtins.list[RunRecord], builtins.list[quiet.Quiet]]:
        """One listing of the markers: the quiet notes they carry (functions/core/quiet.py), unread, and the records
        of the other runs, oldest first, each read only where its marker notes a generation other than the one this
        process has (all of them the first time), at most PARALLEL_READS at once. Given `now`, a marker whose record
        never came (its launch died between the two writes and was not redelivered) is dropped once it is old: a
        redelivery marks the run again before it writes the record. A record that cannot be read as one is moved
        aside (`quarantined` gets its run id and why) so it cannot stall every other run."""
        markers = self.blobs.listing(ACTIVE)
        self.markers = {marker.name.removeprefix(ACTIVE): marker for marker in markers}
        self.recalled = set()
        for gone in set(self.remembered) - set(self.markers):
            self.remembered.pop(gone, None)
        notes, unnoted = [], []
        for run_id, marker in self.markers.items():
            note = quiet.read(run_id, marker.metadata, marker.metadata.get(RECORD_GENERATION), time.time())
            if note is None:
                unnoted.append(marker)
            else:
                notes.append(note)
        return self._records(unnoted, now, quarantined, described=False), notes

    def records_of(
        self,
        notes: builtins.list[quiet.Quiet],
        now: dt.datetime | None = None,
        quarantined: builtins.list[tuple[str, str]] | None = None,
    ) -> builtins.list[RunRecord]:
        """The records of noted runs (watched()), oldest first."""
        markers = [self.markers[n.run_id] for n in notes if n.run_id in self.markers]
        return self._records(markers, now, quarantined, described=True)

    def _records(
        self,
        markers: builtins.list[Listed],
        now: dt.datetime | None,
        quarantined: builtins.list[tuple[str, str]] | None,
        described: bool,
    ) -> builtins.list[RunRecord]:
        """The markers' records (`described`: each marker carries a trusted note of its record, as watched() found,
        so a remembered copy of that generation needs no recheck)."""
        fresh, stale = {}, []
        for marker in markers:
            run_id = marker.name.removeprefix(ACTIVE)
            known = self.remembered.get(run_id)
            if (
                known is not None
                and marker.metadata.get(RECORD_GENERATION) == str(known.record.generation)
                and (described or time.monotonic() - known.read_at < RECHECK_S)
            ):
                fresh[run_id] = known.record.model_copy(deep=True)  # a tick's changes never reach the memory
                self.recalled.add(run_id)
            else:
                stale.append(marker)
                self.recalled.discard(run_id)
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_READS, len(stale)))) as pool:
            reads = list(pool.map(self._read_active, stale))
        for marker, (record, why) in zip(stale, reads, strict=True):
            run_id = marker.name.removeprefix(ACTIVE)
            if why is not None:
                self.quarantine(run_id, why)
                if quarantined is not None:
                    quarantined.append((run_id, why))
            elif record is not None and record.from_newer_release:
                log.warning("%s: a format %d record (a newer release's): left to it", run_id, record.format)
            elif record is not None:
                fresh[run_id] = record
                self.remembered[run_id] = Remembered(record.model_copy(), time.monotonic())
                self._noted_again(marker, record, described)
            elif now is not None and now - marker.created > ORPHAN_AFTER:
                self.blobs.delete(marker.name)
        return sorted(fresh.values(), key=lambda r: r.created_at)

    def read_again(
        self,
        run_ids: builtins.list[str],
        now: dt.datetime | None = None,
        quarantined: builtins.list[tuple[str, str]] | None = None,
    ) -> builtins.list[RunRecord]:
        """The records of these watched runs read from the bucket, whatever this process remembers of them (one that
        cannot be read is moved aside, as by watched())."""
        for run_id in run_ids:
            self.remembered.pop(run_id, None)
        markers = [self.markers[r] for r in run_ids if r in self.markers]
        return self._records(markers, now, quarantined, described=False)

    def _noted_again(self, marker: Listed, record: RunRecord, described: bool) -> None:
        """A record read because its marker did not describe it (an older release's marker, a failed note): noted on
        the marker as listed, unless a writer is replacing it now (it notes its own record, or its marker stays
        unnoted until the write has surely ended). `described`: the marker's note was trusted when listed."""
        run_id = marker.name.removeprefix(ACTIVE)
        if marker.metadata.get(RECORD_GENERATION) == str(record.generation) and (
            described or quiet.noted(record) is None
        ):
            return  # as it should be
        if _writing(marker):
            return
        self.markers[run_id] = marker  # the note goes on this generation of it, or on none
        self._note(run_id, record)

    def _read_active(self, marker: Listed) -> tuple[RunRecord | None, str | None]:
        """The record and None, or None and why it is unreadable (even by the rules it was accepted under)."""
        try:
            record = self.get(marker.name.removeprefix(ACTIVE))
            if record is not None and record.config is not None:
                record.run_config()
            return record, None
        except Unreadable as err:  # corrupt JSON, not a record, or a config no rules accept
            return None, " ".join(str(err).split())[:300]

    def claim_event(self, job: str, state: str, now: dt.datetime) -> bool:
        """Whether this caller publishes the event of the run's attempt `job` for `state`: the first to create the
        claim does; a claim whose publisher died before settling the run (older than STALE_CLAIM) is taken over."""
        path = f"{EVENT_CLAIMS}{job}.{state}"
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
        """Move an unreadable record aside and stop watching it."""
        move_aside(self.blobs, f"{RECORDS}{run_id}.json", f"{QUARANTINE}{run_id}.json")
        self.unmark_active(run_id)


class Allocations:
    """The per-RayCluster allocation objects (functions/core/allocation.py), changed only by CAS. One that cannot
    be read is moved to quarantine/clusters/ and made again by `rebuild` (from the live records and the
    RayCluster: functions/handlers/context.py), so it never fails every run of its RayCluster."""

    def __init__(
        self,
        blobs: Blobs,
        rebuild: Callable[[ClusterSpec, str], Allocation] | None = None,
        pause: Callable[[float], None] = time.sleep,
    ):
        self.blobs, self.rebuild = blobs, rebuild
        # Every launch and tick on a RayCluster writes its allocation: a burst of them contends for the one object,
        # and each that loses tries again after a random pause, for up to ALLOCATION_ATTEMPTS writes (about 25 s).
        self.stored = Stored(blobs, Allocation, lambda path: path, attempts=ALLOCATION_ATTEMPTS, pause=pause)
        self.remembered: dict[str, Allocation] = {}  # by path, as last read by all()

    def get(self, cluster: ClusterSpec) -> Allocation | None:
        return self._read(key_path(cluster), cluster)

    def _read(self, path: str, cluster: ClusterSpec) -> Allocation | None:
        try:
            return self.stored.get(path)
        except Unreadable as err:
            if self.rebuild is None:
                raise
            why = " ".join(str(err).split())[:300]
            move_aside(self.blobs, path, QUARANTINED_ALLOCATIONS + path.removeprefix(ALLOCATIONS))
            try:
                return self.stored.write(path, self.rebuild(cluster, why), if_generation_match=0)
            except Conflict:  # another handler rebuilt it first
                return self.stored.get(path)

    def update(self, cluster: ClusterSpec, change: Callable[[Allocation], Allocation | None]) -> Allocation:
        """CAS-change the RayCluster's allocation (an empty one when it has none yet); returns it as stored."""
        known = self.get(cluster)  # an unreadable one is rebuilt first
        stored = self.stored.swap(
            key_path(cluster), lambda alloc: change(alloc or Allocation(cluster=cluster)), known=known
        )
        return stored or Allocation(cluster=cluster)

    def all(self) -> builtins.list[Allocation]:
        """Every RayCluster the controller ever sized (an unreadable one rebuilt, as by get), from one listing:
        an allocation whose generation is the one this process last read is not read again; the others are read
        at once (a fresh instance reads them all), at most PARALLEL_READS at a time."""
        listed = self.blobs.listing(ALLOCATIONS)
        self.remembered = {
            e.name: a for e in listed if (a := self.remembered.get(e.name)) and a.generation == e.generation
        }
        unread = []
        for entry in listed:
            if entry.name in self.remembered:
                continue
            try:
                unread.append((entry.name, spec_of(entry.name)))
            except ValueError:  # not even a name this controller writes: left for a person
                continue
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_READS, len(unread)))) as pool:
            for (name, _), alloc in zip(unread, pool.map(lambda named: self._readable(*named), unread), strict=True):
                if alloc is not None:
                    self.remembered[name] = alloc
        return [self.remembered[e.name].model_copy() for e in listed if e.name in self.remembered]

    def _readable(self, path: str, cluster: ClusterSpec) -> Allocation | None:
        try:
            return self._read(path, cluster)
        except Unreadable:  # (rebuilt instead wherever this store may rebuild)
            return None
