"""The executor of decisions: runs `functions.core.decide` in a loop on one run, doing each step it
returns and feeding back what the step showed. Nothing here decides anything."""

from __future__ import annotations

import json
import logging
from typing import Any

from functions.core import decide as decisions
from functions.core.config import RunConfig
from functions.core.decide import Action, Facts, Step
from functions.core.errors import NotFound, PermanentError, TransientError, describe, is_transient
from functions.core.result import RunResult
from functions.core.runs import RunRecord
from functions.core.secrets import redact
from functions.handlers.context import Context

log = logging.getLogger(__name__)
MAX_STEPS = 16
RESULT_LIMIT = (
    1024 * 1024
)  # result.json is a few KiB  # a run needs at most 8; more means two handlers keep undoing each other


def run(ctx: Context, record: RunRecord, facts: Facts) -> RunRecord:
    """Act on one run until the decision is NOTHING; returns the record as last written or read."""
    for _ in range(MAX_STEPS):
        step = decisions.decide(record, facts)
        if step.action is Action.NOTHING:
            return record
        if step.action is Action.MOVE:
            record = move(ctx, record, step)
            facts = facts.learned(now=ctx.clock())
        elif step.action is Action.SETTLE:
            record = settle(ctx, record)
            if not record.settled:
                return record  # another handler holds the event's claim and settles it
        else:
            facts = facts.learned(**observe(ctx, record, step.action))
    log.error("%s: no decision reached after %d steps; next tick looks again", record.run_id, MAX_STEPS)
    return record


def observe(ctx: Context, record: RunRecord, action: Action) -> dict[str, Any]:
    """Do a step on the platform and say what it showed, as Facts fields."""
    cfg = RunConfig.model_validate(record.config)
    if action in (Action.ENSURE_CLUSTER, Action.SUBMIT):
        # A permanent GKE/Kubernetes error (403, 404, 400: missing namespace, denied permission, rejected
        # object) fails the run with the API's reason instead of a retry storm; transient ones raise.
        try:
            if action is Action.ENSURE_CLUSTER:
                return {"cluster": ctx.platform.ensure_cluster(cfg)}
            return {"submitted": submit(ctx, cfg, record.run_id)}
        except Exception as exc:
            if is_transient(exc):
                raise
            log.exception("%s: cannot submit", record.run_id)
            return {"submit_error": redact(describe(exc))}  # API errors can quote what was sent
    if action is Action.OBSERVE_JOB:
        try:
            return {"job_seen": True, "job": ctx.platform.job_status(cfg, record.run_id)}
        except Exception as exc:
            # One failed status read never decides a run: looked at again on the next tick.
            raise TransientError(f"cannot read RayJob {record.run_id}: {describe(exc)}") from exc
    if action is Action.STOP_JOB:
        ctx.platform.stop(cfg, record.run_id)
        return {"job_stopped": True}
    if action is Action.SCALE_DOWN:
        scale_down(ctx, cfg)
        return {"scaled": True}
    raise AssertionError(f"not an observation: {action}")


def submit(ctx: Context, cfg: RunConfig, run_id: str) -> str:
    current = ctx.platform.workers(cfg)
    replicas = decisions.launch_replicas(cfg, current.replicas if current else None)
    ctx.platform.submit(cfg, run_id, replicas, trainer_env(ctx))
    return f"RayJob {run_id} on RayCluster {cfg.cluster.ray_cluster} ({replicas} worker nodes)"


def trainer_env(ctx: Context) -> dict[str, str]:
    return {"RAYTUNE_WATCH_TOPIC": ctx.settings.watch_topic} if ctx.settings.watch_topic else {}


def move(ctx: Context, record: RunRecord, step: Step) -> RunRecord:
    """Write the step's transition with a CAS update. A run another handler moved on meanwhile is left as
    stored (the next decision sees it); an illegal transition raises InvalidTransition."""
    assert step.state is not None
    target = step.state
    changes: dict[str, Any] = {}
    if step.job is not None:
        changes["job"] = step.job
    if step.gpu_node_seconds is not None:
        changes["gpu_node_seconds"] = step.gpu_node_seconds
        if ctx.settings.node_hour_price is not None:
            changes["cost"] = round(step.gpu_node_seconds / 3600 * ctx.settings.node_hour_price, 2)
    if step.collect_result:
        changes["result"] = collect_result(ctx, RunConfig.model_validate(record.config), record.run_id)

    def change(current: RunRecord) -> RunRecord | None:
        if current.state != record.state:
            log.info("%s: already %s, not moving it to %s", record.run_id, current.state.value, target.value)
            return None
        return current.moved(target, ctx.clock(), redact(step.reason) if step.reason else None, **changes)

    updated = ctx.store.update(record.run_id, change) or record
    if updated.state != record.state:
        log.info(
            "%s: %s -> %s%s",
            record.run_id,
            record.state.value,
            updated.state.value,
            f" ({updated.reason})" if updated.reason else "",
            extra={"run_id": record.run_id, "state": updated.state.value},
        )
    return updated


def collect_result(ctx: Context, cfg: RunConfig, run_id: str) -> RunResult | None:
    """The trainer's result.json (final and best checkpoints, metrics); None if it never wrote one."""
    assert cfg.storage_path is not None
    uri = f"{cfg.storage_path.rstrip('/')}/{run_id}/result.json"
    try:
        return RunResult.model_validate_json(ctx.read_uri(uri, limit=RESULT_LIMIT))
    except NotFound:
        return None
    except (ValueError, PermanentError) as err:  # not ours to fix by retrying: the record says so
        log.warning("%s: unreadable %s: %s", run_id, uri, describe(err))
        return None


def scale_down(ctx: Context, cfg: RunConfig, attempts: int = 3) -> None:
    """Shrink the GPU worker group to what live runs still need. The group is read before the runs are
    listed and patched only if unchanged since, so a launch that scaled it up meanwhile wins."""
    key = decisions.cluster_key(cfg)
    for _ in range(attempts):
        workers = ctx.platform.workers(cfg)
        if workers is None:
            return
        live = [RunConfig.model_validate(r.config) for r in ctx.store.active() if not r.state.terminal and r.config]
        target = decisions.scale_target(workers.replicas, decisions.gpu_demand(live, key))
        if target is None:
            return
        if ctx.platform.scale(cfg, workers, target):
            log.info("RayCluster %s: GPU workers %d -> %d", cfg.cluster.ray_cluster, workers.replicas, target)
            return
    raise TransientError(f"RayCluster {cfg.cluster.ray_cluster} kept changing while scaling down")


def finished_event(record: RunRecord) -> dict[str, Any]:
    result = record.result or RunResult()
    return {
        "run_id": record.run_id,
        "state": record.state.value,
        "reason": record.reason,
        "source": record.source,
        "name": (record.config or {}).get("name"),
        "storage_path": (record.config or {}).get("storage_path"),
        "final_checkpoint": result.final_checkpoint,
        "best_checkpoint": result.best_checkpoint,
        "adapter_path": result.adapter_path,
        "metrics": result.metrics.model_dump(mode="json", exclude_none=True) if record.result else None,
        "gpu_node_seconds": record.gpu_node_seconds,
        "cost": record.cost,
    }


def settle(ctx: Context, record: RunRecord) -> RunRecord:
    """A terminal run: publish its run-finished event, then stop watching it. One event per run and state
    however many handlers settle it at once (the claim); at least one if its publisher dies (claims go stale)."""
    if not ctx.store.claim_event(record.run_id, record.state.value, ctx.clock()):
        return record  # another handler publishes it and settles the run
    if ctx.settings.events_topic:
        event = json.loads(redact(json.dumps(finished_event(record))))
        ctx.publisher.publish(ctx.settings.events_topic, event, run_id=record.run_id, state=record.state.value)
    settled = ctx.store.update(record.run_id, lambda r: None if r.settled else r.model_copy(update={"settled": True}))
    ctx.store.unmark_active(record.run_id)
    return settled or record
