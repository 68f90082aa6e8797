"""The watch handler: scheduler ticks, the trainer's completion notices and cancel requests (Pub/Sub).

Every message acts on every live run through the decision function (functions/core/decide.py):
pending runs are submitted once their cluster is ready or fail at their deadline, submitted runs
follow their RayJob, cancelled runs have their job stopped, and ended runs scale their RayCluster
down to what its live runs still need, then publish their run-finished event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from functions.core import events, quiet
from functions.core.allocation import key_path
from functions.core.config import ClusterSpec
from functions.core.decide import Facts, cluster_key
from functions.core.errors import Contended, RetryRefused, Unreadable, describe, is_transient
from functions.core.platform import RayObject
from functions.core.runs import RunRecord, State
from functions.handlers import housekeeping, sizing, steps
from functions.handlers.context import Context, current

log = logging.getLogger(__name__)
PARALLEL_RUNS = 16


def handle(event: Any, ctx: Context | None = None) -> list[RunRecord]:
    ctx = ctx or current()
    try:
        request = events.watch_request(event)
    except events.Ignored as why:
        log.info("ignored: %s", why, extra={"ignored": str(why)[:500]})
        return []
    if request.kind in ("cancel", "retry"):
        assert request.run_id is not None
        try:
            record = ctx.store.get(request.run_id)
        except Unreadable as why:
            # Unreadable: moved aside now (it answered 500 until a tick did it) and reported; nothing to act on.
            ctx.store.quarantine(request.run_id, str(why))
            quarantined(ctx, request.run_id, f"{why}; a {request.kind} for it was refused")
            return reconcile_all(ctx)
        if record is not None and record.from_newer_release:
            log.warning(
                "%s: %s left to the newer release whose record (format %d) it is",
                request.run_id,
                request.kind,
                record.format,
                extra={"run_id": request.run_id},
            )
        elif record is not None and not ctx.settings.policy.may_cancel(
            record.source, request.token, request.attributes
        ):
            log.warning(
                "%s: %s refused (policy): without the run's cancel token or the operator key",
                request.run_id,
                request.kind,
                extra={"run_id": request.run_id},
            )
        elif request.kind == "cancel":
            request_cancel(ctx, request.run_id)
        else:
            request_retry(ctx, request.run_id, "raytune retry")
    # A trainer's "finished" notice is a tick now: the job may still be exiting, and then the next tick
    # (within a minute) ends the run; nothing here waits for it.
    return reconcile_all(ctx)


def request_cancel(ctx: Context, run_id: str, reason: str | None = None) -> RunRecord | None:
    """Mark the run for cancelling (the decision function acts on the mark); None for an unknown run."""
    update = {"cancel_requested": True, "cancel_reason": reason}
    record = ctx.store.update(
        run_id, lambda r: None if r.state.terminal or r.cancel_requested else r.model_copy(update=update)
    )
    if record is None:
        log.warning("cancel for unknown run %s", run_id)
    return record


def request_retry(ctx: Context, run_id: str, by: str) -> RunRecord | None:
    """Start the next attempt of an ended run (RunRecord.retried); a run that cannot be retried is logged and
    left as it is (a message is never an error: the sender sees the record)."""
    refused: list[str] = []

    def change(record: RunRecord) -> RunRecord | None:
        try:
            return record.retried(ctx.clock(), by)
        except RetryRefused as why:
            refused.append(str(why))
            return None

    ctx.store.mark_active(run_id)  # first: a retried run is never left unwatched
    record = ctx.store.update(run_id, change)
    if refused or record is None:
        log.warning("retry refused: %s", refused[-1] if refused else f"no run {run_id}", extra={"run_id": run_id})
        current = ctx.store.get(run_id)
        if current is None or current.settled:
            ctx.store.unmark_active(run_id)  # nothing left to watch: the mark was this request's
        return None
    log.info("%s: attempt %d queued (%s)", run_id, record.attempt, by, extra={"run_id": run_id})
    return record


def reconcile_one(
    ctx: Context, record: RunRecord, listed: dict[str, dict] | None = None, released: bool = False
) -> RunRecord | Exception:
    """One run's steps; its trouble is returned, never raised, so it cannot stall the others. An ended run's
    nodes are released by the tick once per RayCluster (reconcile_all), not once per run: it settles in the
    tick's second pass (`released`), so its end is never published before its nodes are released."""
    facts = Facts(now=ctx.clock(), scaled=released)
    try:
        return steps.run(ctx, record, facts, listed, tick_releases=True)
    except Exception as exc:
        if is_transient(exc):
            log.warning("%s: transient error, next tick retries: %s", record.run_id, exc)
            return exc
        log.exception("%s: permanent controller error", record.run_id)
        try:
            return steps.run(ctx, record, facts.learned(error=describe(exc)), tick_releases=True)
        except Exception as again:
            return again


def quarantined(ctx: Context, run_id: str, why: str) -> None:
    """An unreadable record moved to quarantine/runs/: logged and published, for a person to look at."""
    log.error("%s: unreadable run record moved to quarantine/runs/: %s", run_id, why, extra={"run_id": run_id})
    if ctx.settings.events_topic:
        ctx.publisher.publish(
            ctx.settings.events_topic,
            {"run_id": run_id, "state": "QUARANTINED", "reason": f"unreadable record: {why}"},
            run_id=run_id,
            state="QUARANTINED",
        )


def reconcile_all(ctx: Context) -> list[RunRecord]:
    """Every live run at once (a hung call holds one worker thread, not the tick); then each RayCluster a run
    of this tick ended on releases its nodes (runs that ended together each saw the others live), and in a
    second pass its ended runs settle and its queued runs get their turn; then every RayCluster is sized to its
    allocation, idle ones deleted and leaked Ray objects cleaned up (housekeeping.tidy)."""
    moved_aside: list[tuple[str, str]] = []
    records, notes = ctx.store.watched(now=ctx.clock(), quarantined=moved_aside)
    surveyed = survey(ctx, records, notes)
    listed = {
        o.name: o.status for found in surveyed.values() for o in found if o.kind == "RayJob" and o.status is not None
    }
    # A record served from this instance's memory is decided on only where the listing agrees with it.
    doubted = [
        r.run_id for r in records if r.run_id in ctx.store.recalled and not quiet.agrees(r, listed.get(r.job_name))
    ]
    if doubted:
        again = {r.run_id: r for r in ctx.store.read_again(doubted, ctx.clock(), moved_aside)}
        records = [again.get(r.run_id, r) for r in records if r.run_id not in doubted or r.run_id in again]
    # A run whose marker notes it quiet, and whose job the listing shows as noted, has nothing to do: not read.
    passing = [n for n in notes if n.where[:3] in surveyed and quiet.still(n, listed.get(n.job))]
    if len(passing) < len(notes):
        ids = {n.run_id for n in passing}
        changed = ctx.store.records_of([n for n in notes if n.run_id not in ids], ctx.clock(), moved_aside)
        records = sorted(records + changed, key=lambda r: r.created_at)
    for run_id, why in moved_aside:
        quarantined(ctx, run_id, why)
    outcomes = _each(ctx, records, listed)
    reconciled, synced = _release_then_settle(
        ctx, [o for o in outcomes if isinstance(o, RunRecord)], outcomes, {n.run_id for n in passing}
    )
    # tidy sizes the other RayClusters' groups to their allocations and sweeps what no live run owns; the jobs of
    # runs that ended in this tick were listed before they ended: removed there without a leak report.
    live = [r for r in reconciled if not r.state.terminal]
    ended_jobs = {r.job_name for r in reconciled if r.state.terminal}
    outcomes += housekeeping.tidy(ctx, live, surveyed, ended_jobs, synced, passing)
    # A transient failure asks Pub/Sub for the tick again soon; contention (writers of the same record or RayCluster
    # kept changing it) does not: the writers that won did the work, and the next tick finds what is left.
    retry = [o for o in outcomes if isinstance(o, Exception) and is_transient(o) and not isinstance(o, Contended)]
    if retry:
        raise retry[0]
    return reconciled


def _release_then_settle(
    ctx: Context, reconciled: list[RunRecord], outcomes: list[RunRecord | Exception], passing: set[str]
) -> tuple[list[RunRecord], set[str]]:
    """Each RayCluster the tick's ended runs were on is released and sized once, then those runs settle and its
    queued runs get their turn (a second pass). Returns the runs as they are now and the RayClusters sized (their
    allocations' key_path); a release's trouble goes into `outcomes` and leaves its runs unsettled for the next tick.
    The runs this tick saw live (`passing`, and those it left unended) keep their nodes without a read."""
    ended = {
        cluster_key(cfg): cfg for cfg in (r.run_config() for r in reconciled if r.state.terminal and r.may_hold_nodes)
    }
    released = set()
    live = passing | {r.run_id for r in reconciled if not r.state.terminal}
    for key, cfg in ended.items():
        try:
            sizing.release(ctx, cfg.cluster, live=live)
            released.add(key)
        except Exception as exc:
            outcomes.append(exc)
    second = [
        r
        for r in reconciled
        if (r.state == State.QUEUED or (r.state.terminal and not r.settled))
        and r.config is not None
        and cluster_key(r.run_config()) in released
    ]
    if second:
        # an ended run as this tick wrote it (a handler that changed it since loses the settle claim or the write's
        # precondition); a queued one read again: the release may have let it in
        fresh = [r if r.state.terminal else _readable(ctx, r.run_id) or r for r in second]
        again = _each(ctx, fresh, released=True)
        moved = {o.run_id: o for o in again if isinstance(o, RunRecord)}
        reconciled = [moved.get(r.run_id, r) for r in reconciled]
        outcomes += [o for o in again if isinstance(o, Exception)]
    return reconciled, {key_path(cfg.cluster) for key, cfg in ended.items() if key in released}


def _readable(ctx: Context, run_id: str) -> RunRecord | None:
    """The record, or None when it is gone or unreadable (the tick quarantines and reports those)."""
    try:
        return ctx.store.get(run_id)
    except Unreadable as err:
        log.error("%s: unreadable run record: %s", run_id, err, extra={"run_id": run_id})
        return None


Namespace = tuple[str, str, str]  # region, GKE cluster, namespace


def survey(
    ctx: Context, records: list[RunRecord], notes: Sequence[quiet.Quiet] = ()
) -> dict[Namespace, list[RayObject]]:
    """This deployment's RayJobs and RayClusters in every namespace the tick's runs use (read, or noted quiet),
    one listing of each kind per namespace, all at once (a hung one holds its thread): the runs read their job
    statuses from it, and the leak sweep judges it. A namespace whose listing fails is left out: its runs read their
    jobs one by one."""
    namespaces = quiet.namespaces((r.run_config().cluster for r in records if r.config is not None), notes)

    def listing(spec: ClusterSpec) -> list[RayObject] | None:
        try:
            return ctx.platform.ray_objects(spec)
        except Exception as exc:
            log.warning("%s/%s: cannot list its Ray objects: %s", spec.gke_cluster, spec.namespace, describe(exc))
            return None

    if not namespaces:
        return {}
    with ThreadPoolExecutor(max_workers=min(PARALLEL_RUNS, len(namespaces))) as pool:
        found = dict(zip(namespaces, pool.map(listing, namespaces.values()), strict=True))
    return {key: leftovers for key, leftovers in found.items() if leftovers is not None}


def _each(
    ctx: Context, records: list[RunRecord], listed: dict[str, dict] | None = None, released: bool = False
) -> list[RunRecord | Exception]:
    if not records:
        return []
    with ThreadPoolExecutor(max_workers=min(PARALLEL_RUNS, len(records))) as pool:
        return list(pool.map(lambda record: reconcile_one(ctx, record, listed, released), records))
