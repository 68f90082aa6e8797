"""The watch handler: scheduler ticks, the trainer's completion notices and cancel requests (Pub/Sub).

Every message reconciles every live run:
    RECEIVED (handler died) / PROVISIONING -> advance once the cluster is ready, or FAILED at the deadline
    SUBMITTED / RUNNING -> state from the RayJob status; on a terminal state the trainer's result
                           (checkpoints, metrics) goes into the record
    cancel requested -> RayJob stopped, CANCELLED
then scales each RayCluster whose run ended down to what its live runs still need (0 when none),
and settles the ended runs (run-finished event, no longer watched).
"""

from __future__ import annotations

import json
import logging

from functions import events, gcs, lifecycle
from functions.config import RunConfig
from functions.context import Context, current
from functions.reconcile import cluster_key, gpu_demand, job_outcome
from functions.retry import TransientError, is_transient
from functions.runs import RunRecord, State

log = logging.getLogger(__name__)
NOTICE_WAIT_S = 30  # a completion notice arrives just before the Ray job exits
NOTICE_POLL_S = 2
SCALE_ATTEMPTS = 3


def handle(event, ctx: Context | None = None) -> list[RunRecord]:
    ctx = ctx or current()
    try:
        request = events.watch_request(event)
    except events.Ignored as why:
        log.info("ignored: %s", why)
        return []
    if request.kind == "cancel":
        request_cancel(ctx, request.run_id)
    elif request.kind == "finished":
        await_job_end(ctx, request.run_id)
    return reconcile_all(ctx)


def request_cancel(ctx: Context, run_id: str) -> None:
    record = ctx.store.update(run_id, lambda r: None if r.state.terminal or r.cancel_requested
                              else r.model_copy(update={"cancel_requested": True}))
    if record is None:
        log.warning("cancel for unknown run %s", run_id)


def await_job_end(ctx: Context, run_id: str) -> None:
    record = ctx.store.get(run_id)
    if record is None or record.state not in (State.SUBMITTED, State.RUNNING):
        return
    cfg = RunConfig.model_validate(record.config)
    for _ in range(NOTICE_WAIT_S // NOTICE_POLL_S):
        status = ctx.platform.job_status(cfg, run_id)
        if status is None or job_outcome(record, status, ctx.clock(), cfg.deadlines.pending_seconds).state.terminal:
            return
        ctx.sleep(NOTICE_POLL_S)


def reconcile_all(ctx: Context) -> list[RunRecord]:
    reconciled, transient = [], []
    for record in ctx.store.active(now=ctx.clock()):
        try:
            reconciled.append(reconcile(ctx, record))
        except Exception as exc:  # one run's trouble must not stall the others
            if not is_transient(exc):
                log.exception("%s: permanent controller error", record.run_id)
                reconciled.append(lifecycle.transition(ctx, record, State.FAILED, f"controller error: {exc}"))
            else:
                log.warning("%s: transient error, next tick retries: %s", record.run_id, exc)
                transient.append(exc)
    # Only runs that reached the cluster ever counted towards its workers.
    ended = [r for r in reconciled if r.state.terminal and not r.settled
             and any(t.state == State.SUBMITTED for t in r.history)]
    for cfg in {cluster_key(c): c for c in (RunConfig.model_validate(r.config) for r in ended)}.values():
        scale_down(ctx, cfg)
    reconciled = [lifecycle.settle(ctx, r) for r in reconciled]
    if transient:
        raise transient[0]
    return reconciled


def reconcile(ctx: Context, record: RunRecord) -> RunRecord:
    if record.state.terminal:
        return record
    cfg = RunConfig.model_validate(record.config)
    now = ctx.clock()
    if record.state in (State.RECEIVED, State.PROVISIONING):
        if record.cancel_requested:
            return lifecycle.transition(ctx, record, State.CANCELLED, "cancelled on request before submission")
        if (now - record.created_at).total_seconds() > cfg.deadlines.pending_seconds:
            return lifecycle.transition(ctx, record, State.FAILED,
                                        f"not submitted within deadlines.pending_seconds ({cfg.deadlines.pending_seconds}s)")
        if record.state == State.RECEIVED and not lifecycle.claim_expired(ctx, record):
            return record  # its launch handler is still at work
        return lifecycle.advance(ctx, record)
    if record.cancel_requested:
        ctx.platform.stop(cfg, record.run_id)
        return lifecycle.transition(ctx, record, State.CANCELLED, "cancelled on request",
                                    result=collect_result(ctx, cfg, record.run_id))
    status = ctx.platform.job_status(cfg, record.run_id)
    outcome = job_outcome(record, status, now, cfg.deadlines.pending_seconds)
    job = _job_summary(status)
    if not outcome.state.terminal:
        if outcome.state == record.state and job == record.job:
            return record  # nothing new: no write
        return lifecycle.transition(ctx, record, outcome.state, outcome.reason, job=job)
    if status is not None and status.get("jobStatus") not in ("SUCCEEDED", "FAILED", "STOPPED"):
        ctx.platform.stop(cfg, record.run_id)  # a stuck or half-failed job must not hold the GPUs
    return lifecycle.transition(ctx, record, outcome.state, outcome.reason, job=job,
                                result=collect_result(ctx, cfg, record.run_id))


def _job_summary(status: dict | None) -> dict | None:
    if status is None:
        return None
    keys = ("jobStatus", "jobDeploymentStatus", "reason", "message", "startTime", "endTime", "failed")
    return {k: status[k] for k in keys if status.get(k) is not None}


def collect_result(ctx: Context, cfg: RunConfig, run_id: str) -> dict | None:
    """The trainer's result.json (final and best checkpoints, metrics); None if it never wrote one."""
    uri = f"{cfg.storage_path.rstrip('/')}/{run_id}/result.json"
    try:
        return json.loads(ctx.read_uri(uri))
    except gcs.NotFound:
        return None
    except ValueError:
        log.warning("%s: unreadable %s", run_id, uri)
        return None


def scale_down(ctx: Context, cfg: RunConfig) -> None:
    """Shrink the GPU worker group to what live runs still need. The group is read before the runs are
    listed and patched only if unchanged since, so a launch that scaled it up meanwhile wins."""
    key = cluster_key(cfg)
    for _ in range(SCALE_ATTEMPTS):
        workers = ctx.platform.workers(cfg)
        if workers is None:
            return
        demand = gpu_demand(ctx.store.active(), key)
        if demand >= workers.replicas:
            return
        if ctx.platform.scale(cfg, workers, demand):
            log.info("RayCluster %s: GPU workers %d -> %d", cfg.cluster.ray_cluster, workers.replicas, demand)
            return
    raise TransientError(f"RayCluster {cfg.cluster.ray_cluster} kept changing while scaling down")
