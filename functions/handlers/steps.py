"""The executor of decisions: runs `functions.core.decide` in a loop on one run, doing each step it
returns and feeding back what the step showed. Nothing here decides anything."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from functions.core import decide as decisions
from functions.core import joblog, kuberay_lag, kubetime
from functions.core.config import RunConfig
from functions.core.decide import Action, Facts, JobSeen, Move
from functions.core.errors import ClusterGone, NotFound, PermanentError, TransientError, describe, is_transient
from functions.core.platform import AttemptSpan, NodeSeen, Waiting
from functions.core.result import ATTEMPT_ENV, INPUTS_ENV, RESULT_FILE, RunResult, SweepResult, run_folder
from functions.core.runs import Attempt, RunRecord, State
from functions.core.secrets import redact, redact_json, redact_log
from functions.handlers import lineage, sizing
from functions.handlers.context import Context

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_STEPS = 16  # a run needs at most 9; more means two handlers keep undoing each other
RESULT_LIMIT = 1024 * 1024  # result.json is a few KiB
TRIAL_RESULT_BYTES = 32 * 1024  # a sweep's result.json carries each trial's summary and history (about 5 KiB)


def run(
    ctx: Context,
    record: RunRecord,
    facts: Facts,
    listed: dict[str, dict[str, Any]] | None = None,
    tick_releases: bool = False,
) -> RunRecord:
    """Act on one run until the decision is NOTHING; returns the record as last written or read. `listed`: the
    tick's listing of RayJob statuses by name; the run's job is taken from it at its first look (after a step of
    this tick changed it, it is read again). `tick_releases`: the watch tick releases ended runs' nodes itself."""
    rules = rules_of(ctx, tick_releases)
    for _ in range(MAX_STEPS):
        step = decisions.decide(record, facts, rules)
        if step.action is Action.NOTHING:
            return record
        if step.move is not None:
            before = record
            record = move(ctx, record, step.move)
            facts = facts.learned(now=ctx.clock())
            if (record.region, record.attempt) != (before.region, before.attempt) and not _made(step.move, record):
                # another handler moved the run on (another region or attempt): what this one saw of its job is stale
                facts = facts.learned(job=None, job_stopped=False, move_refused=None, status_asked=None)
        elif step.action is Action.SETTLE:
            record = settle(ctx, record)
            if not record.settled:
                return record  # another handler holds the event's claim and settles it
        else:
            facts = facts.learned(**observe(ctx, record, step.action, listed))
    log.error("%s: no decision reached after %d steps; next tick looks again", record.run_id, MAX_STEPS)
    return record


def rules_of(ctx: Context, tick_releases: bool = False) -> decisions.Rules:
    """The deployment's rules for a decision, from the handler's settings."""
    return decisions.Rules(
        retry_backoff_s=ctx.settings.retry_backoff_s,
        region_seconds=ctx.settings.policy.region_seconds,
        tick_releases=tick_releases,
    )


def observe(
    ctx: Context, record: RunRecord, action: Action, listed: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Do a step on the platform and say what it showed, as Facts fields."""
    cfg = record.run_config()
    if action is Action.FINGERPRINT:
        return {"inputs": lineage.inputs(ctx, record, cfg)}
    if action is Action.CONCLUDE:
        return {"promotion": lineage.conclude(ctx, record, cfg)}
    if action in (Action.ADMIT, Action.ENSURE_CLUSTER, Action.SUBMIT) and (breaches := ctx.settings.violations(cfg)):
        # Checked again before anything is applied: the record may have been rewritten in the bucket since its
        # receipt, or the operator's policy tightened while it waited.
        return {"submit_error": "the run's config breaks the operator policy now: " + "; ".join(breaches)}
    if action is Action.ADMIT:
        return {"admission": sizing.admit(ctx, record, cfg)}
    if action in (Action.ENSURE_CLUSTER, Action.SUBMIT):
        # A permanent GKE/Kubernetes error (403, 404, 400: missing namespace, denied permission, rejected
        # object) fails the run with the API's reason instead of a retry storm; transient ones raise.
        try:
            if action is Action.ENSURE_CLUSTER:
                return {"cluster": ctx.platform.ensure_cluster(cfg)}
            return {"submitted": submit(ctx, cfg, record)}
        except Exception as exc:
            if is_transient(exc):
                raise
            log.exception("%s: cannot submit", record.run_id)
            return {"submit_error": redact(describe(exc))}  # API errors can quote what was sent
    if action is Action.OBSERVE_JOB:
        return _job_facts(ctx, cfg, record, listed)
    if action is Action.ASK_STATUS:
        try:
            ctx.platform.ask_status(cfg.cluster, ctx.clock())
        except Exception as exc:
            log.warning("%s: cannot ask KubeRay about its RayCluster: %s", record.run_id, describe(exc))
            return {"status_asked": f"asking KubeRay to look at it again failed ({redact(describe(exc))})"}
        return {"status_asked": "asked KubeRay to look at it again"}
    if action is Action.STOP_JOB:
        ctx.platform.stop(cfg.cluster, record.job_name)
        return {"job_stopped": True}
    if action is Action.STOP_WAITING_JOB:
        refused = ctx.platform.stop_waiting(cfg.cluster, record.job_name, record.run_id)
        if refused is not None:
            log.info("%s: not moved: %s", record.run_id, refused)
            return {"move_refused": refused, "job": None}  # looked at again as it is now
        return {"job_stopped": True}
    if action is Action.SCALE_DOWN:
        sizing.release(ctx, cfg.cluster)
        return {"scaled": True}
    raise AssertionError(f"not an observation: {action}")


def _job_facts(
    ctx: Context, cfg: RunConfig, record: RunRecord, listed: dict[str, dict[str, Any]] | None
) -> dict[str, Any]:
    """The run's RayJob as the tick listed it (else read by name) and what is seen around it, as Facts fields."""
    try:
        job = listed.pop(record.job_name, None) if listed is not None else None
        if job is None:  # not listed (gone, or submitted since): read by name
            job = ctx.platform.job_status(cfg, record.job_name)
    except ClusterGone as gone:
        return {"cluster_gone": describe(gone)}
    except Exception as exc:
        # One failed status read never decides a run: looked at again on the next tick.
        raise TransientError(f"cannot read RayJob {record.job_name}: {describe(exc)}") from exc
    waits = waiting(ctx, cfg, record.run_id, job)
    seen = JobSeen(
        job,
        stuck=waits.reason,
        bound=waits.bound,
        lag=lag(ctx, cfg, record.run_id, job),
        lost=lost(ctx, cfg, record, job),
        nodes=nodes(ctx, cfg, record, job),
    )
    return {"job": seen}


def submit(ctx: Context, cfg: RunConfig, record: RunRecord) -> str:
    sizing.sync_workers(ctx, cfg.cluster, launching=(cfg, record.run_id))
    job = record.job_name
    ctx.platform.submit(cfg, record.run_id, job, {**trainer_env(ctx, record), **lineage.trainer_env(ctx, cfg)})
    attempt = f", attempt {record.attempt}" if record.attempt > 1 else ""
    nodes = cfg.group_nodes
    # The run's own nodes (its worker group), not the RayCluster's: other runs' groups share it.
    return f"RayJob {job} on RayCluster {cfg.cluster.ray_cluster} ({nodes} worker node{'s' * (nodes != 1)} of its own{attempt})"


def nodes(ctx: Context, cfg: RunConfig, record: RunRecord, job: dict[str, Any] | None) -> dict[str, NodeSeen] | None:
    """A running job's nodes, where they came from and who they are, read until all of them are known (then not
    again: a tick stays one status read per run)."""
    if job is None or job.get("jobStatus") != "RUNNING" or len(record.node_ids) >= cfg.group_nodes:
        return None
    return best_effort(record.run_id, "its nodes", lambda: ctx.platform.worker_nodes(cfg, record.run_id), None)


def lost(ctx: Context, cfg: RunConfig, record: RunRecord, job: dict[str, Any] | None) -> tuple[str, ...]:
    """What took a failed or vanished job's nodes, from the platform (Ray's own message is read by the decision):
    a failed read makes it a training failure, never a retry storm."""
    if job is not None and job.get("jobStatus") != "FAILED" and job.get("jobDeploymentStatus") != "Failed":
        return ()
    identities = {name: seen.identity for name, seen in record.seen_nodes.items()}
    ended = kubetime.parsed((job or {}).get("endTime"))  # a node that went after the job ended took nothing of it
    lines: list[str] = best_effort(
        record.run_id,
        "what happened to its nodes",
        lambda: ctx.platform.disruptions(cfg, record.run_id, AttemptSpan(record.submitted_at, identities, ended)),
        [],
    )
    return tuple(redact(line) for line in lines)


def waiting(ctx: Context, cfg: RunConfig, run_id: str, job: dict[str, Any] | None) -> Waiting:
    """Why a waiting job waits (its own pods and their Events), and whether its capacity came."""
    if job is None or (job.get("jobStatus") or None) not in decisions.WAITING:
        return Waiting()
    # Unknown (a failed read) counts as bound: a run is never moved on a guess that its nodes did not come.
    seen = best_effort(run_id, "why the job waits", lambda: ctx.platform.waiting_for(cfg, run_id), Waiting(None, True))
    return Waiting(redact(seen.reason) if seen.reason else None, seen.bound)


def lag(ctx: Context, cfg: RunConfig, run_id: str, job: dict[str, Any] | None) -> str | None:
    """A job KubeRay holds back for its RayCluster's state: whether that state lags the cluster's pods."""
    if not kuberay_lag.waits_for_cluster(job):
        return None
    return best_effort(
        run_id, "its RayCluster's status", lambda: ctx.platform.status_lag(cfg.cluster, ctx.clock()), None
    )


def best_effort(run_id: str, what: str, read: Callable[[], T], default: T) -> T:
    """A read that is news for the record, not a decision: its failure is logged and `default` stands."""
    try:
        return read()
    except Exception as exc:
        log.warning("%s: cannot read %s: %s", run_id, what, describe(exc))
        return default


def trainer_env(ctx: Context, record: RunRecord) -> dict[str, str]:
    topic = {"RAYTUNE_WATCH_TOPIC": ctx.settings.watch_topic} if ctx.settings.watch_topic else {}
    # A nightly's fingerprint of its inputs, a tag of its tracked run (the dataset versions it trained on).
    inputs = {INPUTS_ENV: record.inputs.fingerprint} if record.inputs and record.inputs.fingerprint else {}
    return {**topic, **inputs, ATTEMPT_ENV: str(record.attempt)}


def move(ctx: Context, record: RunRecord, transition: Move) -> RunRecord:
    """Write the transition with a CAS update. A run another handler moved on meanwhile is left as
    stored (the next decision sees it); an illegal transition raises InvalidTransition."""
    target = transition.state
    changes = _changes(ctx, record, transition)
    # Where a run stood in line stays on it when it ends there (cancelled, queue deadline).
    changes["queue_position"] = transition.queue_position if target == State.QUEUED else None
    if transition.collect_result:
        changes["result"], unreadable = collect_result(ctx, record.run_config(), record.run_id)
        transition = decisions.with_result_read(transition, unreadable)
        target = transition.state
    if transition.collect_result or (target == State.QUEUED and transition.attempts):
        keep_log(ctx, record)  # the attempt ended: its log outlives its RayJob

    def change(current: RunRecord) -> RunRecord | None:
        if transition.placements is not None and current.generation != record.generation:
            # A move between regions is a write on the record it was decided from: a stale copy (another watcher
            # moved the run meanwhile) never moves it twice; the executor decides again on the stored record.
            log.info("%s: changed since its move was decided; decided again", record.run_id)
            return None
        if target.terminal and current.state == State.QUEUED:
            changes["queue_position"] = current.queue_position
        if current.state != record.state:
            log.info("%s: already %s, not moving it to %s", record.run_id, current.state.value, target.value)
            return None
        if target == current.state and (
            (transition.promotion and current.promotion) or (transition.inputs and current.inputs)
        ):
            return None  # another handler of the run wrote them first
        return current.moved(target, ctx.clock(), redact(transition.reason) if transition.reason else None, **changes)

    updated = ctx.store.update(record.run_id, change, known=record) or record
    if updated.state != record.state:
        log.info(
            "%s: %s -> %s%s",
            record.run_id,
            record.state.value,
            updated.state.value,
            f" ({updated.reason})" if updated.reason else "",
            extra={"run_id": record.run_id, "state": updated.state.value},
        )
    if updated.state == State.QUEUED and updated.reason != record.reason:
        publish_state(ctx, updated)
    return updated


def _changes(ctx: Context, record: RunRecord, transition: Move) -> dict[str, Any]:
    """The record fields a transition writes besides its state: what it carries, each ended attempt priced, the
    run's GPU time and cost."""
    changes: dict[str, Any] = {}
    for field in ("job", "inputs", "promotion", "placements"):
        if (value := getattr(transition, field)) is not None:
            changes[field] = value
    attempts = record.attempts
    if transition.attempts is not None:
        attempts = changes["attempts"] = [
            a.model_copy(update={"cost": priced(ctx, a.gpu_node_seconds or 0.0, a.nodes)})
            if a.ended_at is not None and a.cost is None
            else a
            for a in transition.attempts
        ]
    if transition.nodes is not None:
        changes["nodes"] = {name: seen.capacity for name, seen in transition.nodes.items()}
        changes["node_ids"] = {name: seen.identity for name, seen in transition.nodes.items() if seen.identity}
    if transition.gpu_node_seconds is not None:
        changes["gpu_node_seconds"] = transition.gpu_node_seconds
        changes["cost"] = cost(ctx, transition.gpu_node_seconds, attempts, changes.get("nodes", record.nodes))
    return changes


def _made(transition: Move, record: RunRecord) -> bool:
    """Whether the record is where this move put it (its placements or attempts as the move wrote them)."""
    return (transition.placements is not None and record.placements == transition.placements) or (
        transition.attempts is not None and record.attempts[-1:] == transition.attempts[-1:]
    )


def cost(ctx: Context, gpu_node_seconds: float, attempts: list[Attempt], nodes: dict[str, str]) -> float | None:
    """The GPU cost over the run's attempts: the ended ones' own costs, and the current one's seconds at the price
    of its nodes' capacity (the settings' price per option, else the one price); None without prices."""
    if ctx.settings.node_hour_price is None and not ctx.settings.node_hour_prices:
        return None
    ended = [a for a in attempts if a.ended_at is not None]
    current = gpu_node_seconds - sum(a.gpu_node_seconds or 0.0 for a in ended)
    costs = [a.cost for a in ended if a.gpu_node_seconds]
    if current > 0:
        costs.append(priced(ctx, current, nodes))
    if any(c is None for c in costs):
        return None  # a capacity without a price: no cost rather than a wrong one
    return round(sum(c for c in costs if c is not None), 2)


def priced(ctx: Context, gpu_node_seconds: float, nodes: dict[str, str]) -> float | None:
    """GPU node-seconds at the price of nodes of these capacities; None without one."""
    price = ctx.settings.node_hour_price_of(nodes)
    return None if price is None else round(gpu_node_seconds / 3600 * price, 2)


def publish_state(ctx: Context, record: RunRecord) -> None:
    """A run-state event: a run that waits in line says so, and where it stands, as its place changes."""
    if ctx.settings.events_topic:
        event = {"event": "run-state", **{k: v for k, v in finished_event(record).items() if k in STATE_KEYS}}
        ctx.publisher.publish(
            ctx.settings.events_topic, event, run_id=record.run_id, state=record.state.value, event="run-state"
        )


STATE_KEYS = ("run_id", "state", "reason", "name", "source", "queue_position")


def keep_log(ctx: Context, record: RunRecord) -> None:
    """Copy the ended attempt's driver log into the runs bucket (logs/), redacted, for `raytune logs` after the
    RayJob and its submitter pod are gone; best effort: the record's reason already says why it ended."""
    try:
        # Cut first, then redacted in pieces: a 96 MiB log never lives whole in the watcher's 512 MiB.
        text = ctx.platform.job_log(record.run_config(), record.job_name, limit=joblog.KEPT_LOG_BYTES)
        if text:
            ctx.store.keep_log(record.run_id, record.job_name, redact_log(text))
    except Exception as exc:
        log.warning("%s: cannot keep its driver log: %s", record.run_id, describe(exc))


def collect_result(ctx: Context, cfg: RunConfig, run_id: str) -> tuple[RunResult | None, str | None]:
    """The trainer's result.json (final and best checkpoints, metrics, a sweep's trials), read up to a size its
    sweep's trial count allows; (None, None) if it never wrote one, (None, why) if it cannot be read."""
    assert cfg.storage_path is not None
    uri = f"{run_folder(cfg.storage_path, run_id)}/{RESULT_FILE}"
    limit = RESULT_LIMIT + (cfg.sweep.trials * TRIAL_RESULT_BYTES if cfg.sweep else 0)
    try:
        return RunResult.model_validate_json(ctx.read_uri(uri, limit=limit)), None
    except NotFound:
        return None, None
    except (ValueError, PermanentError) as err:  # not ours to fix by retrying: the record says so
        log.warning("%s: unreadable %s: %s", run_id, uri, describe(err))
        return None, f"{uri}: {describe(err, 300)}"


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
        "evaluation": result.evaluation.model_dump(mode="json", exclude_none=True) if result.evaluation else None,
        "report_path": result.evaluation.report_path if result.evaluation else None,
        "merged_path": result.merged_path,
        "hub": {"repo": result.hub_repo, "revision": result.hub_revision} if result.hub_revision else None,
        "promotion": record.promotion.model_dump(mode="json") if record.promotion else None,
        "inputs": record.inputs.model_dump(mode="json") if record.inputs else None,
        "gpu_node_seconds": record.gpu_node_seconds,
        "cost": record.cost,
        "attempts": [a.model_dump(mode="json") for a in record.attempts] or None,
        "nodes": record.nodes or None,
        "region": record.region,  # where it ran (or ended): its last region
        # where it waited and why it moved on, for a run that moved between regions (functions/core/regions.py)
        "placements": [p.model_dump(mode="json") for p in record.placements] or None,
        "queue_position": record.queue_position,
        "sweep": sweep_of(result.sweep, record.cost) if result.sweep else None,
    }


def sweep_of(sweep: SweepResult, cost: float | None) -> dict[str, Any]:
    """A sweep's trials for the event, each with its share of the run's cost (by the node-seconds it held)."""
    said = sweep.model_dump(mode="json", exclude_none=True)
    held = sum(t.node_seconds or 0.0 for t in sweep.trials)
    if cost is not None and held:
        for trial, told in zip(sweep.trials, said["trials"], strict=True):
            told["cost"] = round(cost * (trial.node_seconds or 0.0) / held, 2)
    return said


def settle(ctx: Context, record: RunRecord) -> RunRecord:
    """A terminal run: publish its run-finished event, then stop watching it. One event per run and state
    however many handlers settle it at once (the claim); at least one if its publisher dies (claims go stale)."""
    # One claim per attempt's end (its RayJob's name: the run id for the first, as releases before wrote it): a
    # retried run that ends in the same state again has its event published, not held for an earlier attempt's claim.
    if not ctx.store.claim_event(record.job_name, record.state.value, ctx.clock()):
        return record  # another handler publishes it and settles the run
    if ctx.settings.events_topic:
        event = redact_json(finished_event(record))
        ctx.publisher.publish(
            ctx.settings.events_topic, event, run_id=record.run_id, state=record.state.value, event="run-finished"
        )
    settled = ctx.store.update(
        record.run_id, lambda r: None if r.settled else r.model_copy(update={"settled": True}), known=record
    )
    ctx.store.unmark_active(record.run_id)
    return settled or record
