"""Executes the allocation decisions (functions/core/allocation.py): admit or queue a run, release the
nodes of ended runs, and bring a RayCluster's worker group to its allocation with fenced writes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from functions.core import allocation
from functions.core.allocation import Admission, Allocation, key_path
from functions.core.config import ClusterSpec, RunConfig
from functions.core.errors import Contended, PermanentError, Unreadable, race_pause
from functions.core.runs import RunRecord
from functions.handlers.context import Context

log = logging.getLogger(__name__)
# Writers of one RayCluster's groups (a burst of launches, the tick) each read, decide and write; the ones that
# lose read again after errors.race_pause. 8 tries: at most about 6 s of pauses, well inside a delivery's time.
ATTEMPTS = 8


@dataclass(frozen=True)
class Standing:
    """What a run's record, read fresh, says about its place in a RayCluster's allocation."""

    live: bool  # it still needs its place (unreadable counts as live: nodes are never freed on a guess)
    unserved: str | None = None  # why this release cannot act on it (it would never admit it)


def standing(ctx: Context, run_id: str, spec: ClusterSpec) -> Standing:
    """Read fresh, never from a listing made earlier, so a run admitted meanwhile is never dropped. A run that moved
    to another region (its record now places it in another cluster) has left this RayCluster."""
    try:
        record = ctx.store.get(run_id)
    except Unreadable as err:  # the tick quarantines and reports it
        return Standing(True, f"its record cannot be read: {' '.join(str(err).split())[:120]}")
    if record is None or record.state.terminal:
        return Standing(False)
    if record.from_newer_release:
        return Standing(True, f"a newer release's record (format {record.format})")
    if key_path(record.run_config().cluster) != key_path(spec):
        return Standing(False)
    return Standing(True)


def admit(ctx: Context, record: RunRecord, cfg: RunConfig) -> Admission:
    """Hold the run's nodes in its RayCluster's allocation, or keep it queued; first in, first served (among the
    runs this release serves)."""
    outcome: list[Admission] = []

    def admitted(alloc: Allocation, unserved: dict[str, str] | None = None) -> tuple[Allocation | None, Admission]:
        return allocation.admit(
            alloc,
            record.run_id,
            cfg.group_nodes,
            record.arrived,
            cfg.cluster,
            cfg.cluster.idle_delete_seconds,
            ctx.settings.policy.max_worker_nodes,
            unserved,
        )

    def change(alloc: Allocation) -> Allocation | None:
        new, admission = admitted(alloc)
        if not admission.admitted:
            # Only a run that would wait reads the others' records (fresh, each once): runs that ended without
            # the watcher having released them yet give up their place, runs this release cannot act on are
            # passed, and it is admitted into the room and the turn they leave. A launch that fits reads none,
            # however many runs hold the RayCluster.
            seen = {
                run_id: standing(ctx, run_id, cfg.cluster)
                for run_id in [*alloc.holders, *(w.run_id for w in alloc.queue)]
            }
            seen[record.run_id] = Standing(True)
            cleaned = allocation.release(alloc, lambda run_id: seen[run_id].live, ctx.clock())
            unserved = {run_id: s.unserved for run_id, s in seen.items() if s.unserved is not None}
            if cleaned is not None or unserved:
                new, admission = admitted(cleaned or alloc, unserved)
                new = new or cleaned
        outcome.append(admission)
        return new

    ctx.allocations.update(cfg.cluster, change)
    return outcome[-1]


def recorded(ctx: Context) -> Callable[[str], bool]:
    """Whether this deployment has a record of the run (one it cannot read accounts for nothing)."""

    def exists(run_id: str) -> bool:
        try:
            return ctx.store.get(run_id) is not None
        except Unreadable:
            return False

    return exists


def _listed(groups: dict[str, int]) -> str:
    return ", ".join(f"{group}: {replicas} worker nodes" for group, replicas in sorted(groups.items())[:5])


def release(ctx: Context, spec: ClusterSpec, sync: bool = True, live: Collection[str] = ()) -> None:
    """Drop the ended runs from the RayCluster's allocation, then (unless the caller does it later) size its
    workers to what is left. `live`: runs the caller saw live (kept without a read: keeping a run that ended since
    only delays its release to the next tick); every other holder's record is read fresh."""
    if ctx.allocations.get(spec) is None:
        return  # never sized by this controller
    ctx.allocations.update(
        spec,
        lambda alloc: allocation.release(
            alloc, lambda run_id: run_id in live or standing(ctx, run_id, spec).live, ctx.clock()
        ),
    )
    if sync:
        sync_workers(ctx, spec)


def sync_workers(
    ctx: Context,
    spec: ClusterSpec,
    launching: tuple[RunConfig, str] | None = None,
    read: Allocation | None = None,
    listed: object = None,
) -> int:
    """Bring the worker groups to the allocation (`read`: as just listed, for the first try); returns the nodes
    they hold. A launch (given its run's config and id) may create the RayCluster and adds its run's group. Every
    write is conditional on the RayCluster as read and on its stamp being older than the allocation, so a stale
    writer loses. `listed`: the RayCluster as the tick listed it (RayObject.handle), taken instead of a read when
    it was last sized for this very allocation (its stamp is the allocation's version: nothing wrote it since)."""
    for attempt in range(ATTEMPTS):
        if attempt:
            ctx.sleep(race_pause(attempt))
        alloc = read if attempt == 0 and read is not None else ctx.allocations.get(spec)
        if alloc is None:
            return 0
        workers = ctx.platform.workers(spec, listed) if attempt == 0 and listed is not None else None
        if workers is None or workers.stamp != alloc.version:
            workers = ctx.platform.workers(spec)
        if workers is not None and not workers.managed:
            if launching is None:
                return workers.replicas  # not ours to shrink
            raise PermanentError(
                f"RayCluster {spec.namespace}/{spec.ray_cluster} exists and is not managed by raytune "
                "(no app.kubernetes.io/managed-by=raytune label): choose another cluster.ray_cluster"
            )
        run_id = launching[1] if launching else None
        foreign = allocation.foreign(alloc, workers, run_id, recorded(ctx)) if workers is not None else {}
        if launching is not None and workers is not None and not workers.labelled and any(foreign.values()):
            raise PermanentError(
                f"RayCluster {spec.namespace}/{spec.ray_cluster} was made before deployments were labelled and runs "
                f"worker groups no record of this deployment accounts for ({_listed(foreign)}): it is not taken "
                "over; choose another cluster.ray_cluster"
            )
        target = allocation.sizing(alloc, workers, run_id, foreign)
        if target is None:
            return workers.replicas if workers else 0
        if launching is not None:
            done = ctx.platform.size(launching[0], launching[1], workers, target, alloc.version)
        else:
            assert workers is not None
            adopt = allocation.adoptable(workers, foreign)
            done = ctx.platform.scale(spec, workers, target, alloc.version, adopt=adopt)
        if done:
            log.info(
                "RayCluster %s in %s: worker nodes %s -> %d (groups %s -> %s, allocation %d)",
                spec.ray_cluster,
                spec.region,
                workers.replicas if workers else "none",
                sum(target.values()),
                workers.groups if workers else {},
                target,
                alloc.version,
            )
            return sum(target.values())
    raise Contended(f"RayCluster {spec.ray_cluster} kept changing while being sized ({ATTEMPTS} writes lost)")
