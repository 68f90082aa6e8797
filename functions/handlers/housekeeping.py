"""Once per watch tick, for every RayCluster the controller sized: delete it when it has been idle for
`cluster.idle_delete_seconds` (its head pod bills around the clock), else bring its worker groups to the
allocation (an ended run's drained group leaves the spec), and sweep the RayJobs and RayClusters
carrying the controller's labels that no live run owns (leaks: a launch that died mid-way, a record
removed by hand, an older controller). Leaks are stopped, logged and reported on the run-events topic."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from functions.core import allocation, quiet
from functions.core.allocation import Allocation
from functions.core.config import ClusterSpec
from functions.core.errors import ClusterGone, Unreadable, describe
from functions.core.platform import RayObject, Workers
from functions.core.runs import RunRecord
from functions.handlers import sizing
from functions.handlers.context import Context

log = logging.getLogger(__name__)


def tidy(
    ctx: Context,
    live: list[RunRecord],
    surveyed: dict[tuple[str, str, str], list[RayObject]] | None = None,
    ended: set[str] | frozenset[str] = frozenset(),
    synced: set[str] | frozenset[str] = frozenset(),
    passing: Sequence[quiet.Quiet] = (),
) -> list[Exception]:
    """Idle teardown and leak sweep; each cluster's trouble is returned so one cannot stall the others. `surveyed`:
    the Ray objects the tick listed at its start, by namespace (the others are listed here); `ended`: the RayJobs
    of runs that ended in this tick, which that listing may show still running; `synced`: the RayClusters (their
    allocation's key_path) this tick sized already, as their runs ended; `passing`: the live runs the tick passed by
    on their markers' notes (functions/core/quiet.py), unread."""
    allocs = ctx.allocations.all()
    # Where each live run of the tick stands now (its RayCluster's key_path). A place held or queued for by a run that
    # is not live there (it moved to another region, ended in this tick or before, or the tick does not know it) is
    # released: release() reads each such run's record fresh, so a run admitted since the tick began keeps its place.
    placed = {r.run_id: allocation.key_path(r.run_config().cluster) for r in live if r.config}
    placed |= {n.run_id: allocation.path_of(n.where) for n in passing}
    listed = {
        (region, gke, namespace, o.name): o.handle
        for (region, gke, namespace), found in (surveyed or {}).items()
        for o in found
        if o.kind == "RayCluster"
    }
    troubles = [trouble for alloc in allocs if (trouble := _kept(ctx, alloc, placed, listed, synced))]
    return troubles + _swept(ctx, allocs, live, surveyed, ended, passing)


def _kept(
    ctx: Context,
    alloc: Allocation,
    placed: dict[str, str],
    listed: dict[tuple[str, str, str, str], object],
    synced: set[str] | frozenset[str],
) -> Exception | None:
    """One RayCluster's idle teardown, or its groups released or sized to its runs; its trouble, if any."""
    try:
        here = allocation.key_path(alloc.cluster)
        if allocation.idle_expired(alloc, ctx.clock()):
            teardown(ctx, alloc)
        elif not alloc.deleted and any(
            placed.get(run_id) != here for run_id in [*alloc.holders, *(w.run_id for w in alloc.queue)]
        ):
            # its group goes, exactly: the runs seen live here keep their places without a read
            sizing.release(ctx, alloc.cluster, live={run_id for run_id, key in placed.items() if key == here})
        elif not alloc.deleted and here not in synced:
            # Groups of ended runs leave the spec once drained; a size a lost write left behind is repaired.
            spec = alloc.cluster
            handle = listed.get((spec.region, spec.gke_cluster, spec.namespace, spec.ray_cluster))
            sizing.sync_workers(ctx, spec, read=alloc, listed=handle)
    except ClusterGone as gone:
        settle_gone(ctx, alloc, gone)
    except Exception as exc:
        log.warning("RayCluster %s: idle teardown or sizing failed: %s", alloc.cluster.ray_cluster, describe(exc))
        return exc
    return None


def _swept(
    ctx: Context,
    allocs: list[Allocation],
    live: list[RunRecord],
    surveyed: dict[tuple[str, str, str], list[RayObject]] | None,
    ended: set[str] | frozenset[str],
    passing: Sequence[quiet.Quiet],
) -> list[Exception]:
    """The leak sweep of every namespace a RayCluster or a live run is in; each namespace's trouble."""
    troubles: list[Exception] = []
    specs = [a.cluster for a in allocs] + [r.run_config().cluster for r in live if r.config]
    namespaces = quiet.namespaces(specs, passing)
    # A RayCluster is ours to keep when it has an allocation or a live run names it (runs of an older
    # controller have no allocation yet: their next release creates one).
    known = {(s.region, s.gke_cluster, s.namespace, s.ray_cluster) for s in specs} | {n.where for n in passing}
    # A live run's job is its current attempt's RayJob in the region where the run is now, and only there.
    live_jobs = {(*_namespace(r.run_config().cluster), r.job_name) for r in live if r.config}
    live_jobs |= {(*n.where[:3], n.job) for n in passing}
    for (region, gke, namespace), spec in namespaces.items():
        try:
            found = (surveyed or {}).get((region, gke, namespace))
            if found is None:
                found = ctx.platform.ray_objects(spec)
            jobs = {job for *where, job in live_jobs if tuple(where) == (region, gke, namespace)}
            sweep(ctx, spec, found, {k[3] for k in known if k[:3] == (region, gke, namespace)}, jobs, ended)
        except ClusterGone:
            continue  # nothing is left on a cluster that is gone
        except Exception as exc:
            log.warning("%s/%s: leak sweep failed: %s", gke, namespace, describe(exc))
            troubles.append(exc)
    return troubles


def _namespace(spec: ClusterSpec) -> tuple[str, str, str]:
    return (spec.region, spec.gke_cluster, spec.namespace)


def settle_gone(ctx: Context, alloc: Allocation, gone: ClusterGone) -> None:
    """The RayCluster's GKE cluster no longer exists (its client is dropped): an allocation no run holds or waits
    for is marked deleted, as an idle teardown would, so the tick moves past it and the next admission makes the
    RayCluster afresh (on a cluster of the same name, if one is made again). Runs that hold it learn it on their
    own (their job's cluster is gone) and release it."""
    spec = alloc.cluster

    def deleted(current: Allocation) -> Allocation | None:
        return None if current.deleted or current.holders or current.queue else current.changed(deleted=True)

    ctx.allocations.update(spec, deleted)
    log.warning("RayCluster %s: %s; its allocation settled", spec.ray_cluster, describe(gone))


def teardown(ctx: Context, alloc: Allocation, attempts: int = 3) -> None:
    """Delete an idle RayCluster, fenced twice: the allocation is marked deleted only if no run was admitted
    since it was read, and the delete only happens if the RayCluster is still as read (a launch that sized
    it meanwhile wins; one that comes after recreates it). KubeRay's status writes also move the
    resourceVersion: the delete is tried again on a fresh read, and if it still cannot land the mark is
    taken back so the next tick tries again."""
    spec = alloc.cluster
    workers = ctx.platform.workers(spec)

    def held_by_others(workers: Workers) -> bool:
        return not workers.managed or any(allocation.foreign(alloc, workers, None, sizing.recorded(ctx)).values())

    if workers is not None and (workers.stamp > alloc.version or held_by_others(workers)):
        return  # sized for a newer admission, or not ours (or holding nodes of groups no record accounts for)
    marked = ctx.allocations.update(spec, lambda a: a.changed(deleted=True) if a.version == alloc.version else None)
    if not marked.deleted or marked.version != alloc.version + 1:
        return  # a run was admitted meanwhile
    idle = int((ctx.clock() - (alloc.idle_since or ctx.clock())).total_seconds())
    for _ in range(attempts):
        if workers is None:
            return  # gone already
        if workers.stamp > marked.version or held_by_others(workers):
            break  # a launch sized it after the mark: it is in use again
        if ctx.platform.delete_cluster(spec, workers):
            log.info("RayCluster %s: deleted after %ds idle (cluster.idle_delete_seconds)", spec.ray_cluster, idle)
            return
        workers = ctx.platform.workers(spec)
    ctx.allocations.update(
        spec, lambda a: a.model_copy(update={"deleted": False}) if a.version == marked.version else None
    )


def sweep(
    ctx: Context,
    spec: ClusterSpec,
    found: list[RayObject],
    sized: set[str],
    live: set[str],
    ended: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Of `found` (the Ray objects the tick listed), stop RayJobs that are not the current attempt of a live run in
    this namespace's region (`live`: their names; a finished run's RayJob, or a retried run's earlier one, is removed
    quietly; one left where its run no longer is, or a running one with no live run, is a leak) and delete
    RayClusters of this deployment it has no allocation for. Only objects labelled with this deployment (its runs
    bucket) are looked at, and each is checked against fresh state right before it goes: what the tick listed at its
    start may be stale (a launch can admit a run and create its RayCluster meanwhile). What no record accounts for is
    left alone for a grace period after its creation (a clock ahead of the API server's counts as young)."""
    grace = ctx.settings.sweep_grace_s

    def young(leftover: RayObject) -> bool:
        return leftover.created is not None and (ctx.clock() - leftover.created).total_seconds() < grace

    for leftover in found:
        if leftover.kind == "RayJob":
            if leftover.name in live:
                continue  # read this tick: the current attempt of a live run
            run_id = leftover.run_id or leftover.name
            try:
                record = ctx.store.get(run_id)
            except Unreadable:
                continue  # quarantined and reported; its job is not judged on a guess
            live_run = record is not None and not (record.state.terminal and record.settled)
            moved = record is not None and record.config is not None and record.region != spec.region
            if live_run and record is not None and record.job_name == leftover.name and not moved:
                continue
            if record is None and young(leftover):
                continue
            ctx.platform.stop(spec, leftover.name)
            if (leftover.active and leftover.name not in ended) or record is None:
                why = (
                    "its run has no record"
                    if record is None
                    else f"its run moved to {record.region}"
                    if live_run and moved
                    else f"an earlier attempt of its run (now {record.job_name})"
                    if live_run
                    else f"its run is {record.state.value}"
                )
                report(ctx, run_id, f"RayJob {spec.namespace}/{leftover.name} stopped: {why}")
        elif leftover.name not in sized and not young(leftover):
            leaked = spec.model_copy(update={"ray_cluster": leftover.name})
            if ctx.allocations.get(leaked) is not None:
                continue  # admitted since the tick began: a launch sized it for its run
            workers = ctx.platform.workers(leaked)
            if workers is not None and workers.managed and ctx.platform.delete_cluster(leaked, workers):
                report(
                    ctx, None, f"RayCluster {spec.namespace}/{leftover.name} deleted: no run of this controller uses it"
                )


def report(ctx: Context, run_id: str | None, what: str) -> None:
    log.warning("leak: %s", what, extra={"run_id": run_id} if run_id else None)
    if ctx.settings.events_topic:
        event = {"event": "leak", "run_id": run_id, "state": "LEAKED", "reason": what}
        ctx.publisher.publish(ctx.settings.events_topic, event, state="LEAKED", event="leak", run_id=run_id or "")
