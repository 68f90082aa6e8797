"""What an active run's marker notes so that a watch tick can pass the run by without reading its record.

A run RUNNING on all its nodes, with no cancel asked, waits on one thing: its RayJob's status. Its marker
(runs/active/<run id>) carries a `Quiet` note: the record's generation, where the job is, the job's name and a
digest of the job status the record holds. A tick whose listing shows that job with that status knows without
the record that `decide` would do nothing and that no step would look at the platform (tests/unit/test_quiet.py
holds this for any record and status), so the cost of a tick follows the runs whose jobs changed.

The note is kept true by the store (functions/adapters/store.py): a writer takes it off before it replaces a record
that has one, and notes a record only on the marker generation it saw (a compare-and-swap on the marker).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from functions.core.config import ClusterSpec
from functions.core.decide import DEPLOYMENT_TERMINAL, job_summary
from functions.core.runs import RunRecord, State

NOTE = "raytune-quiet"  # the marker's metadata key of the note
WRITING = "raytune-writing"  # set, with the time, by a writer that took the note off before its write
VERSION = 1  # a note of another version is not this release's to trust: the record is read
# A note is trusted this long after it was put on, then its record is read and noted again: a record changed behind
# the store's back (edited or deleted by hand) is seen within this, at one read of each quiet run an hour.
TRUSTED_S = 3600


@dataclasses.dataclass(frozen=True)
class Quiet:
    run_id: str
    generation: int  # the record generation it describes (the marker's record-generation must say the same)
    where: tuple[str, str, str, str]  # region, GKE cluster, namespace, RayCluster
    job: str  # the RayJob's name
    seen: str  # digest of the RayJob status summary the record holds

    @property
    def cluster(self) -> ClusterSpec:
        region, gke_cluster, namespace, ray_cluster = self.where
        return ClusterSpec(region=region, gke_cluster=gke_cluster, namespace=namespace, ray_cluster=ray_cluster)

    def encoded(self, now: float) -> str:
        """As put on the marker at `now` (seconds since the epoch)."""
        fields = {"v": VERSION, "g": self.generation, "where": self.where, "job": self.job, "seen": self.seen}
        return json.dumps({**fields, "at": int(now)})


def namespaces(specs: Iterable[ClusterSpec], notes: Iterable[Quiet]) -> dict[tuple[str, str, str], ClusterSpec]:
    """A cluster spec for every namespace (region, GKE cluster, namespace) that live runs use, read or noted quiet:
    the first spec given for it, else one made from a note."""
    found: dict[tuple[str, str, str], ClusterSpec] = {}
    for spec in specs:
        found.setdefault((spec.region, spec.gke_cluster, spec.namespace), spec)
    for note in notes:
        if note.where[:3] not in found:
            found[note.where[:3]] = note.cluster
    return found


def digest(summary: dict[str, Any] | None) -> str:
    return hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[:20]


def noted(record: RunRecord) -> Quiet | None:
    """The note for this record, or None where a tick must read the record to judge the run."""
    if record.state != State.RUNNING or record.cancel_requested or record.config is None or record.from_newer_release:
        return None
    job = record.job or {}
    if job.get("jobStatus") != "RUNNING" or job.get("jobDeploymentStatus") in DEPLOYMENT_TERMINAL:
        return None
    cfg = record.run_config()
    if len(record.nodes) < cfg.group_nodes:
        return None  # a tick still asks the platform for its nodes
    c = cfg.cluster
    where = (c.region, c.gke_cluster, c.namespace, c.ray_cluster)
    return Quiet(record.run_id, record.generation, where, record.job_name, digest(record.job))


def read(run_id: str, metadata: dict[str, str], generation: str | None, now: float) -> Quiet | None:
    """The note a marker carries, if it is this release's, describes the record generation the marker names
    (`generation`: its record-generation; an older release notes that alone, leaving an older note behind) and was
    put on within TRUSTED_S of `now`."""
    try:
        found = json.loads(metadata.get(NOTE) or "null")
        if not isinstance(found, dict) or found.get("v") != VERSION or str(found.get("g")) != generation:
            return None
        where = tuple(str(part) for part in found["where"])
        if len(where) != 4 or abs(now - float(found["at"])) >= TRUSTED_S:  # either way: clocks differ a little
            return None
        return Quiet(run_id, int(found["g"]), where, str(found["job"]), str(found["seen"]))
    except (ValueError, KeyError, TypeError):
        return None


def still(note: Quiet, status: dict[str, Any] | None) -> bool:
    """Whether the listed status of its RayJob leaves the run as noted (None: the job is gone)."""
    return status is not None and digest(job_summary(status)) == note.seen


def agrees(record: RunRecord, status: dict[str, Any] | None) -> bool:
    """Whether a copy of the record a process remembers agrees with the listed status of its current RayJob
    (None: not listed), so that deciding on it decides on what is so: a submitted run's job shows the status the
    copy holds, any other run's shows none. A copy that does not agree is read again before anything is decided
    (a note that lost a race can leave a marker naming an older generation: issue 51)."""
    if record.state in (State.SUBMITTED, State.RUNNING):
        return status is not None and job_summary(status) == record.job
    return status is None


def writing_since(metadata: dict[str, str]) -> dt.datetime | None:
    """When a writer took the note off for a write of its own (None: no writer said so, or it has noted since)."""
    try:
        return dt.datetime.fromisoformat(metadata[WRITING]) if metadata.get(WRITING) else None
    except ValueError:
        return None
