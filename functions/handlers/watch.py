"""The watch handler: scheduler ticks, the trainer's completion notices and cancel requests (Pub/Sub).

Every message acts on every live run through the decision function (functions/core/decide.py):
pending runs are submitted once their cluster is ready or fail at their deadline, submitted runs
follow their RayJob, cancelled runs have their job stopped, and ended runs scale their RayCluster
down to what its live runs still need, then publish their run-finished event.
"""

from __future__ import annotations

import logging
from typing import Any

from functions.core import events
from functions.core.config import RunConfig
from functions.core.decide import Facts, job_outcome, pending_seconds
from functions.core.errors import describe, is_transient
from functions.core.runs import RunRecord, State
from functions.handlers import steps
from functions.handlers.context import Context, current

log = logging.getLogger(__name__)
NOTICE_WAIT_S = 30  # a completion notice arrives just before the Ray job exits
NOTICE_POLL_S = 2


def handle(event: Any, ctx: Context | None = None) -> list[RunRecord]:
    ctx = ctx or current()
    try:
        request = events.watch_request(event)
    except events.Ignored as why:
        log.info("ignored: %s", why)
        return []
    if request.kind == "cancel":
        assert request.run_id is not None
        request_cancel(ctx, request.run_id)
    elif request.kind == "finished":
        assert request.run_id is not None
        await_job_end(ctx, request.run_id)
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


def await_job_end(ctx: Context, run_id: str) -> None:
    record = ctx.store.get(run_id)
    if record is None or record.state not in (State.SUBMITTED, State.RUNNING):
        return
    cfg = RunConfig.model_validate(record.config)
    for _ in range(NOTICE_WAIT_S // NOTICE_POLL_S):
        status = ctx.platform.job_status(cfg, run_id)
        if status is None or job_outcome(record, status, ctx.clock(), pending_seconds(record))[0].terminal:
            return
        ctx.sleep(NOTICE_POLL_S)


def reconcile_all(ctx: Context) -> list[RunRecord]:
    reconciled: list[RunRecord] = []
    transient: list[Exception] = []
    for record in ctx.store.active(now=ctx.clock()):
        try:
            reconciled.append(steps.run(ctx, record, Facts(now=ctx.clock())))
        except Exception as exc:  # one run's trouble must not stall the others
            if is_transient(exc):
                log.warning("%s: transient error, next tick retries: %s", record.run_id, exc)
                transient.append(exc)
            else:
                log.exception("%s: permanent controller error", record.run_id)
                reconciled.append(steps.run(ctx, record, Facts(now=ctx.clock(), error=describe(exc))))
    if transient:
        raise transient[0]
    return reconciled
