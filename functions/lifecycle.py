"""Steps shared by the launch and watch handlers: state transitions, submission, settling."""

from __future__ import annotations

import logging

from functions.config import RunConfig
from functions.context import Context
from functions.retry import is_transient
from functions.runs import InvalidTransition, RunRecord, State

log = logging.getLogger(__name__)
# A RECEIVED run belongs to the handler that created it for this long; after that, it died mid-way
# and a redelivery or the watcher takes the run over.
CLAIM_SECONDS = 120


def transition(ctx: Context, record: RunRecord, state: State, reason: str | None = None, **changes) -> RunRecord:
    """Move the run to `state` with a CAS write. A run another handler already moved on (or ended)
    is left as it is and returned as stored."""

    def change(current: RunRecord) -> RunRecord | None:
        if current.state.terminal or (current.state == state and not changes):
            return None
        try:
            return current.moved(state, ctx.clock(), reason, **changes)
        except InvalidTransition:
            return None

    updated = ctx.store.update(record.run_id, change) or record
    if updated.state != record.state:
        log.info("%s: %s -> %s%s", record.run_id, record.state.value, updated.state.value,
                 f" ({updated.reason})" if updated.reason else "",
                 extra={"run_id": record.run_id, "state": updated.state.value})
    return updated


def claim_expired(ctx: Context, record: RunRecord) -> bool:
    return (ctx.clock() - record.updated_at).total_seconds() > CLAIM_SECONDS


def trainer_env(ctx: Context) -> dict[str, str]:
    return {"RAYTUNE_WATCH_TOPIC": ctx.settings.watch_topic} if ctx.settings.watch_topic else {}


def advance(ctx: Context, record: RunRecord) -> RunRecord:
    """RECEIVED or PROVISIONING: submit the run when its cluster is ready, else start the cluster and wait.

    A permanent error from GKE or Kubernetes (403, 404, 400: missing namespace, denied permission,
    rejected object) fails the run with the reason instead of a retry storm; transient ones raise."""
    cfg = RunConfig.model_validate(record.config)
    try:
        readiness = ctx.platform.ensure_cluster(cfg)
        if readiness.state == "provisioning":
            return transition(ctx, record, State.PROVISIONING, readiness.message)
        if readiness.state == "error":
            return transition(ctx, record, State.FAILED, readiness.message)
        # Never shrink the shared cluster under a larger live run: shrinking is the watcher's job.
        current = ctx.platform.workers(cfg)
        replicas = max(cfg.scaling.nodes, current.replicas if current else 0)
        ctx.platform.submit(cfg, record.run_id, replicas, trainer_env(ctx))
    except Exception as exc:
        if is_transient(exc):
            raise
        log.exception("%s: cannot submit", record.run_id)
        return transition(ctx, record, State.FAILED, f"cannot submit: {_describe(exc)}")
    return transition(ctx, record, State.SUBMITTED,
                      f"RayJob {record.run_id} on RayCluster {cfg.cluster.ray_cluster} ({replicas} worker nodes)")


def _describe(exc: Exception) -> str:
    """A short reason: the API's own message where there is one (kubernetes ApiException carries JSON)."""
    import json

    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError):
        message = None
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    text = message or str(exc)
    return (f"HTTP {status}: {text}" if status else f"{type(exc).__name__}: {text}")[:500]


def finished_event(record: RunRecord) -> dict:
    result = record.result or {}
    return {
        "run_id": record.run_id,
        "state": record.state.value,
        "reason": record.reason,
        "source": record.source,
        "name": (record.config or {}).get("name"),
        "storage_path": (record.config or {}).get("storage_path"),
        "final_checkpoint": result.get("final_checkpoint"),
        "best_checkpoint": result.get("best_checkpoint"),
        "adapter_path": result.get("adapter_path"),
        "metrics": result.get("metrics"),
    }


def settle(ctx: Context, record: RunRecord) -> RunRecord:
    """A terminal run: publish its run-finished event (at least once), then stop watching it."""
    if not record.state.terminal or record.settled:
        return record
    if ctx.settings.events_topic:
        ctx.publisher.publish(ctx.settings.events_topic, finished_event(record),
                              run_id=record.run_id, state=record.state.value)
    settled = ctx.store.update(record.run_id, lambda r: None if r.settled else r.model_copy(update={"settled": True}))
    ctx.store.unmark_active(record.run_id)
    return settled or record
