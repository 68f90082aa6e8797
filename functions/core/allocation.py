"""The GPU worker group of one RayCluster as a pure value: who holds its nodes, who waits, and what size the
group must have. One allocation object per RayCluster lives in the bucket (`clusters/<key>.json`) and is
only ever changed by compare-and-swap, so it is the single, linearizable truth about the group:

- a run is *admitted* (holds `scaling.nodes` worker nodes) when it is first in the FIFO queue and its
  nodes fit beside the holders' under `cluster.max_worker_nodes` and the operator's cap; otherwise it waits,
  QUEUED;
- a run that ended (or whose record is gone) holds nothing: `release` drops it;
- each holder has a worker group of its own in the RayCluster, sized to its nodes, and it goes to zero (then
  out of the spec) when its run ends, so GPU nodes are released exactly (`sizing`), stamped with the
  allocation's `version` on the RayCluster. A writer whose version is older than the stamp it finds loses (`sizing`), and every write
  to the RayCluster is conditional on the resourceVersion it read, so sizes only ever move forward in
  allocation order: a stale scale-down can never remove a node a newer admission counts on.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from functions.core import kuberay_lag
from functions.core.config import ClusterSpec
from functions.core.platform import Workers
from functions.core.release import Stamped

ALLOCATIONS = "clusters/"
LEGACY_GROUP = "gpu-group"  # the one worker group every run shared before groups were per run
RUN_GROUP = re.compile(r"run-[0-9a-f]{12}")  # group_name's form


class Waiting(BaseModel):
    run_id: str
    nodes: int
    arrived: dt.datetime  # the run's creation: the queue is FIFO by arrival


class Allocation(Stamped, BaseModel):
    cluster: ClusterSpec  # the RayCluster's spec as the last admitted run gave it (for teardown and sweeps)
    version: int = 0  # +1 on every change: the stamp the RayCluster carries
    holders: dict[str, int] = {}  # run id -> worker nodes it holds
    queue: list[Waiting] = []
    idle_since: dt.datetime | None = None  # when the last holder and waiter left
    idle_delete_seconds: int = 1800
    deleted: bool = False  # the idle RayCluster was deleted; the next admission recreates it
    generation: int = Field(0, exclude=True)  # the bucket object's generation this copy was read at

    @property
    def wanted(self) -> int:
        return sum(self.holders.values())

    def position(self, run_id: str) -> int | None:
        """1-based place in the queue, None when not waiting."""
        return next((i + 1 for i, w in enumerate(self.queue) if w.run_id == run_id), None)

    def changed(self, **changes: object) -> Allocation:
        return self.model_copy(update={**changes, "version": self.version + 1})


@dataclass(frozen=True)
class Admission:
    admitted: bool
    position: int | None = None  # in the queue when not admitted
    queued: int = 0  # how many wait in all
    held: int = 0  # nodes the holders hold beside this run
    limit: int = 0
    passed: tuple[tuple[str, str], ...] = ()  # (run id, why) of runs ahead that this release cannot act on

    def describe(self, nodes: int) -> str:
        if self.admitted:
            said = f"admitted: {nodes} worker nodes ({self.held} held by other runs, limit {self.limit})"
        else:
            said = (
                f"queued {self.position} of {self.queued}: needs {nodes} worker nodes, {self.held} of "
                f"{self.limit} (cluster.max_worker_nodes) held by other runs"
            )
        return said + self.passed_note

    @property
    def passed_note(self) -> str:
        if not self.passed:
            return ""
        ahead = "; ".join(f"{run_id} ({why})" for run_id, why in self.passed)
        return f"; ahead in line but not served by this release, so passed: {ahead}"


def release(alloc: Allocation, live: Callable[[str], bool], now: dt.datetime) -> Allocation | None:
    """The allocation without runs that are no longer live (None: nothing to change)."""
    holders = {run_id: nodes for run_id, nodes in alloc.holders.items() if live(run_id)}
    queue = [w for w in alloc.queue if live(w.run_id)]
    if holders == alloc.holders and queue == alloc.queue:
        return None
    idle = (alloc.idle_since or now) if not holders and not queue else None
    return alloc.changed(holders=holders, queue=queue, idle_since=idle)


def admit(
    alloc: Allocation,
    run_id: str,
    nodes: int,
    arrived: dt.datetime,
    cluster: ClusterSpec,
    idle_delete: int,
    operator_limit: int | None = None,
    unserved: Mapping[str, str] | None = None,
) -> tuple[Allocation | None, Admission]:
    """Admit the run if it is first in line and fits, else keep it queued in FIFO order. Returns the new
    allocation (None: unchanged) and the outcome. Idempotent: an admitted run stays admitted. The limit is the
    run's own `cluster.max_worker_nodes` under the operator's (policy max_worker_nodes): a run may ask for
    less room beside it, never more than the operator allows any RayCluster.

    `unserved`: waiting runs this release cannot act on (run id -> why: a newer release's record, one it cannot
    read), which it would never admit, so they do not hold the line: they keep their place in the queue, and a
    run behind them is served as if they were not there, the reason saying whom it passed."""
    unserved = unserved or {}
    limit = min(cluster.max_worker_nodes, operator_limit or cluster.max_worker_nodes)
    if run_id in alloc.holders:
        return None, Admission(True, held=alloc.wanted - alloc.holders[run_id], limit=limit)
    queue = (
        alloc.queue if alloc.position(run_id) else [*alloc.queue, Waiting(run_id=run_id, nodes=nodes, arrived=arrived)]
    )
    queue = sorted(queue, key=lambda w: (w.arrived, w.run_id))
    mine = next(i for i, w in enumerate(queue) if w.run_id == run_id)
    passed = tuple((w.run_id, unserved[w.run_id]) for w in queue[:mine] if w.run_id in unserved)
    place = mine - len(passed)
    common = {"cluster": cluster, "idle_delete_seconds": idle_delete, "idle_since": None, "deleted": False}
    if place == 0 and alloc.wanted + nodes <= limit:
        rest = [w for w in queue if w.run_id != run_id]
        admitted = alloc.changed(holders={**alloc.holders, run_id: nodes}, queue=rest, **common)
        return admitted, Admission(True, held=alloc.wanted, limit=limit, passed=passed)
    waiting = alloc.changed(queue=queue, **common) if queue != alloc.queue else None
    return waiting, Admission(
        False,
        position=place + 1,
        queued=sum(w.run_id not in unserved for w in queue),
        held=alloc.wanted,
        limit=limit,
        passed=passed,
    )


@functools.lru_cache(maxsize=16384)  # asked 4 times a run by every tick's sizing: a hash each time was 5 % of it
def group_name(run_id: str) -> str:
    """The RayCluster worker group of one run: its nodes are its own, so they go exactly when it ends."""
    return "run-" + hashlib.sha256(run_id.encode()).hexdigest()[:12]


def foreign(alloc: Allocation, seen: Workers, launching: str | None, recorded: Callable[[str], bool]) -> dict[str, int]:
    """The RayCluster's worker groups this deployment did not make and no record of it accounts for (name ->
    replicas as read): they are never resized or removed, and a RayCluster holding one with nodes is never
    adopted or deleted. A group is accounted for when a holder of the allocation owns it; on a RayCluster
    carrying this deployment's label, when it has the form this deployment gives groups (run-<hash>, or the
    shared group of the release before per-run groups); on one made before deployments were labelled (by this
    deployment's earlier release or by another deployment's), when the run its pod template names has a record
    here (`recorded`), or, for the shared group, while a run this allocation admitted under it holds nodes."""
    wanted = {group_name(run_id) for run_id in alloc.holders}
    unrendered = any(group_name(r) not in seen.groups for r in alloc.holders if r != launching)

    def accounted(group: str) -> bool:
        if group in wanted:
            return True
        if seen.labelled:
            return group == LEGACY_GROUP or RUN_GROUP.fullmatch(group) is not None
        if group == LEGACY_GROUP:
            return unrendered
        run_id = seen.runs.get(group)
        return run_id is not None and group_name(run_id) == group and recorded(run_id)

    return {group: replicas for group, replicas in seen.groups.items() if not accounted(group)}


def sizing(
    alloc: Allocation, seen: Workers | None, launching: str | None, foreign: Mapping[str, int] | None = None
) -> dict[str, int] | None:
    """The worker groups to write (name -> replicas), or None to leave them, given the RayCluster's groups as
    read (`seen`: None when there is no RayCluster) and those of them no record accounts for (`foreign`: kept
    exactly as read). Each holder has a group of its
    own (`group_name`), so an ended run's nodes go exactly, never a live run's: with the autoscaler off
    KubeRay removes pods at random only within a group that shrinks (ray-operator/controllers/ray/
    raycluster_controller.go, reconcilePods, v1.5.2), and a group is only ever shrunk to zero.

    Only a launch (`launching`: its run id) creates the RayCluster or adds a group, its own, rendered from its
    config; the watcher only resizes groups that exist. A group whose run ended goes to zero and, once KubeRay
    has deleted its pods (`drained`), out of the spec: KubeRay's reconcilePods walks only the groups in the
    spec, so pods of a group removed early would be orphaned. The group of the previous release (one shared
    group) keeps its size while a run admitted under it still holds nodes. A newer allocation already applied
    wins (stamp). A RayCluster made before deployments were labelled is written (and so labelled: adopted) once
    no group with nodes in it is foreign."""
    foreign = foreign or {}
    wanted = {group_name(run_id): nodes for run_id, nodes in alloc.holders.items()}
    own = group_name(launching) if launching in alloc.holders else None
    if seen is None:
        return {own: wanted[own]} if own else None
    if seen.stamp > alloc.version:
        return None
    unrendered = [r for r in alloc.holders if group_name(r) not in seen.groups and group_name(r) != own]
    target: dict[str, int] = {}
    for group, replicas in seen.groups.items():
        if group in wanted:
            target[group] = wanted[group]
        elif group in foreign or (group == LEGACY_GROUP and unrendered):
            target[group] = replicas  # not ours, or its runs were admitted before groups were per run
        elif group not in seen.drained:
            target[group] = 0
    if own:
        target[own] = wanted[own]
    if not seen.ready:
        # A RayCluster KubeRay has never called ready holds every job on it: a group whose wait for capacity keeps it
        # so while another run's group is ready stays at zero until it is (kuberay_lag.held), then is sized.
        for group in kuberay_lag.held(wanted, seen.groups, seen.head_ready, seen.group_pods):
            if group in target:
                target[group] = 0
    if adoptable(seen, foreign):
        return target  # written, and so labelled, while everything in it is accounted for
    if target == seen.groups and (seen.stamp == alloc.version or not seen.labelled):
        return None  # nothing to change (nor a stamp to leave on a RayCluster that is not only ours)
    return target


def adoptable(seen: Workers, foreign: Mapping[str, int]) -> bool:
    """Whether a RayCluster made before deployments were labelled is this deployment's to label: every group in
    it with nodes is accounted for (one of another deployment's running groups is never taken over)."""
    return not seen.labelled and not any(foreign.values())


@dataclass(frozen=True)
class LiveRun:
    """What a run record says about its place, for rebuilding an allocation."""

    run_id: str
    nodes: int
    arrived: dt.datetime
    admitted: bool  # it moved past admission (PROVISIONING, SUBMITTED, RUNNING): it holds its nodes


def rebuilt(cluster: ClusterSpec, live: list[LiveRun], stamp: int, now: dt.datetime) -> Allocation:
    """The allocation made again when its object is unreadable: the live runs of the RayCluster that were
    admitted hold their nodes, the others wait in arrival order, and the version is above the stamp the
    RayCluster carries (so the next sizing write is not refused as stale, and never shrinks a live run's group:
    sizing keeps the group at least as large as it is while anyone holds nodes)."""
    holders = {r.run_id: r.nodes for r in live if r.admitted}
    queue = sorted(
        (Waiting(run_id=r.run_id, nodes=r.nodes, arrived=r.arrived) for r in live if not r.admitted),
        key=lambda w: (w.arrived, w.run_id),
    )
    return Allocation(
        cluster=cluster,
        version=stamp + 1,
        holders=holders,
        queue=queue,
        idle_since=None if holders or queue else now,
        idle_delete_seconds=cluster.idle_delete_seconds,
    )


def spec_of(path: str) -> ClusterSpec:
    """The RayCluster an allocation object is about, from its name alone (key_path's inverse)."""
    region, gke_cluster, namespace, name = path.removeprefix(ALLOCATIONS).removesuffix(".json").split("/")
    return ClusterSpec(region=region, gke_cluster=gke_cluster, namespace=namespace, ray_cluster=name)


def idle_expired(alloc: Allocation, now: dt.datetime) -> bool:
    """Whether an idle RayCluster should go (its head pod costs money around the clock)."""
    if alloc.deleted or alloc.holders or alloc.queue or alloc.idle_since is None or alloc.idle_delete_seconds == 0:
        return False
    return (now - alloc.idle_since).total_seconds() >= alloc.idle_delete_seconds


def key_path(cluster: ClusterSpec) -> str:
    """The allocation object's name in the bucket, one per RayCluster."""
    return path_of((cluster.region, cluster.gke_cluster, cluster.namespace, cluster.ray_cluster))


def path_of(where: tuple[str, str, str, str]) -> str:
    """key_path of a RayCluster named by (region, GKE cluster, namespace, RayCluster), as a quiet note names it:
    no ClusterSpec is built (a tick passes by a thousand quiet runs)."""
    region, gke_cluster, namespace, ray_cluster = where
    return f"{ALLOCATIONS}{region}/{gke_cluster}/{namespace}/{ray_cluster}.json"
