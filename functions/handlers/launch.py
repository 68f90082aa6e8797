"""The launch handler: a run config uploaded to configs/ (storage finalize) or a launch message (Pub/Sub).

    event -> ignored (not a config)
          -> run record exists: duplicate delivery, nothing more to do (unless its first
             handler died mid-way: then this one takes over)
          -> REJECTED (bad or stale config; recorded, event acknowledged: no retry storm)
          -> RECEIVED -> PROVISIONING (cluster being created; the watcher resumes it)
                      -> SUBMITTED (Secret, ConfigMap, RayCluster, RayJob applied)

What happens after the record is written is decided by functions/core/decide.py. Transient errors
raise after retries, so the platform redelivers; the deterministic run id makes the redelivery land
on the same record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Any

from functions.core import acceptance, events
from functions.core.config_file import MAX_CONFIG_BYTES
from functions.core.decide import Facts
from functions.core.errors import Conflict, NotFound, PermanentError, TooLarge, Unreadable, describe
from functions.core.runs import RunRecord, State, Transition
from functions.core.secrets import redact, redact_kept
from functions.handlers import steps
from functions.handlers.context import Context, current

log = logging.getLogger(__name__)
RAW_CONFIG_KEPT = 16 * 1024


def handle(event: Any, ctx: Context | None = None) -> RunRecord | None:
    ctx = ctx or current()
    try:
        request = events.launch_request(event)
    except events.Malformed as why:
        kept = keep_malformed(ctx, event, str(why))
        log.error("rejected launch event: %s (kept as %s)", why, kept, extra={"rejected": str(why)[:500], "kept": kept})
        return None
    except events.Ignored as why:
        log.info("ignored: %s", why, extra={"ignored": str(why)[:500]})
        return None
    record, created = receive(ctx, request)
    if record.from_newer_release:  # a newer release's record of this run: that release acts on it
        log.warning("%s: a format %d record (a newer release's): left to it", record.run_id, record.format)
        return record
    if not created and record.state == State.RECEIVED and record.claim_released:
        taken = take_claim(ctx, record)
        record, created = (taken, True) if taken is not None else (record, False)
    if not created:
        log.info(
            "%s: duplicate delivery, run is %s",
            record.run_id,
            record.state.value,
            extra={"run_id": record.run_id, "state": record.state.value},
        )
    try:
        return steps.run(ctx, record, Facts(now=ctx.clock(), handler="launch", created=created))
    except Exception:
        if created:
            give_claim_back(ctx, record.run_id)
        raise


def take_claim(ctx: Context, record: RunRecord) -> RunRecord | None:
    """The claim a failed handler gave back, taken by this delivery (one of several at once wins the write)."""
    try:
        return ctx.store.put(record.model_copy(update={"claim_released": False, "updated_at": ctx.clock()}))
    except Conflict:
        return None


def give_claim_back(ctx: Context, run_id: str) -> None:
    """This delivery fails (it raises, and the platform redelivers its event): a run it left RECEIVED is given back,
    so the redelivery takes it over at once rather than waiting out the claim. Best effort: without it the claim
    expires as before."""

    def released(record: RunRecord) -> RunRecord | None:
        if record.state != State.RECEIVED or record.claim_released:
            return None
        return record.model_copy(update={"claim_released": True})

    try:
        ctx.store.update(run_id, released, attempts=3)
    except Exception as exc:
        log.warning("%s: cannot give its claim back (it expires instead): %s", run_id, describe(exc))


MALFORMED = "quarantine/events/"  # launch events no run id could be derived from, kept for a person
MALFORMED_KEPT = 64 * 1024  # of the event's body


def keep_malformed(ctx: Context, event: Any, why: str) -> str | None:
    """A copy of an event no run id can be derived from, in the runs bucket under quarantine/events/ (outside
    runs/: nothing reads it as state), its body redacted and cut to MALFORMED_KEPT; its path, or None when it could
    not be written (the log line says why all the same)."""
    attributes = event.get_attributes() if hasattr(event, "get_attributes") else {}
    raw = event.get_data() if hasattr(event, "get_data") else None
    body = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else json.dumps(raw, default=str)
    kept = {
        "reason": why,
        "event": {
            k: redact_kept(str(v)[:1024])
            for k, v in attributes.items()
            if k in ("id", "type", "source", "subject", "time")
        },
        # Redacted whole (a cut could leave part of a token), secrets by their field's name too: the Pub/Sub
        # envelope's attributes carry the operator's and the scheduler's keys.
        "data": redact_kept(body)[:MALFORMED_KEPT],
    }
    data = json.dumps(kept, indent=2).encode()
    path = f"{MALFORMED}{hashlib.sha256(data).hexdigest()[:24]}.json"
    try:
        ctx.store.blobs.write(path, data, if_generation_match=0)
    except Conflict:
        pass  # the same event kept already (a redelivery)
    except Exception as exc:
        log.warning("cannot keep the rejected event: %s", describe(exc))
        return None
    return path


def receive(ctx: Context, request: events.LaunchRequest) -> tuple[RunRecord, bool]:
    """Read, judge (functions/core/acceptance.py), write: the run recorded RECEIVED, or REJECTED with every
    reason; a run already recorded is returned as it is."""
    if acceptance.nightly_refusal(request, ctx.settings):
        # Rejected under its own id: a publisher without the scheduler's key cannot take the day's nightly slot.
        request = dataclasses.replace(request, run_id=request.message_run_id or request.run_id)
    try:
        existing = ctx.store.get(request.run_id)
    except Unreadable as err:  # rewritten in the bucket: kept aside for a person, and this delivery goes ahead
        log.error("%s: unreadable run record moved to quarantine/runs/: %s", request.run_id, err)
        ctx.store.quarantine(request.run_id, str(err))
        existing = None
    if existing is not None:
        return existing, False
    now = ctx.clock()
    document = None if acceptance.before_reading(request, ctx.settings, now) else _read(ctx, request)
    verdict = acceptance.judge(request, document, ctx.settings, now)
    state = State.RECEIVED if verdict.accepted else State.REJECTED
    reason = "; ".join(verdict.errors)[:2000] or None
    accepted = verdict.config if verdict.accepted else None
    record = RunRecord(
        run_id=request.run_id,
        state=state,
        source=request.source,
        created_at=now,
        updated_at=now,
        config=accepted.model_dump(mode="json") if accepted else None,
        raw_config=None if verdict.accepted else _kept(document.raw if document else None),
        reason=reason,
        errors=verdict.errors,
        warnings=verdict.warnings,
        estimate=verdict.estimate if verdict.accepted else None,
        history=[Transition(state=state, at=now, reason=reason)],
    )
    # Marked before the record exists: a crash in between leaves the watcher a trail, never a lost run. A marker
    # made here notes no generation, so every watcher reads the new record: noting it would be a write for nothing.
    fresh = ctx.store.mark_active(request.run_id)
    return ctx.store.create(record, noted=not fresh)


def _read(ctx: Context, request: events.LaunchRequest) -> acceptance.Document:
    """The request's config: the message's own, or the object its config_uri names (bounded in size)."""
    if request.config is not None:
        return acceptance.Document(request.config)
    assert request.config_uri is not None
    try:
        return acceptance.Document(ctx.read_uri(request.config_uri, limit=MAX_CONFIG_BYTES))
    except NotFound:
        return acceptance.Document(unreadable=f"{request.config_uri} does not exist")
    except TooLarge:
        return acceptance.Document(
            unreadable=f"{request.config_uri} is larger than {MAX_CONFIG_BYTES} bytes, the limit for a config"
        )
    except PermanentError as err:  # a bucket we may not read, a name GCS refuses
        return acceptance.Document(unreadable=f"cannot read {request.config_uri}: {describe(err)}")


def _kept(raw: bytes | dict[str, Any] | None) -> str | None:
    """What a rejected config said, for the user to see why: secrets scrubbed, size bounded."""
    if raw is None:
        return None
    text = json.dumps(raw) if isinstance(raw, dict) else raw.decode("utf-8", "replace")
    return redact(text)[:RAW_CONFIG_KEPT]
