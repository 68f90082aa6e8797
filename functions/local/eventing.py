"""One `raytune local` run: the launch and watch handlers driven by hand, as Eventarc, Pub/Sub and the scheduler
drive them in the cloud: the config uploaded (or a night's launch message), ticks until the run settles, a
cancel or a retry through the same decisions as their messages."""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from functions.core.champion import Promotion
from functions.core.decide import Facts
from functions.core.errors import RetryRefused, describe, is_transient
from functions.core.runs import RETRYABLE, RunRecord
from functions.core.story import Story
from functions.handlers import launch, steps, watch
from functions.handlers.context import Context
from functions.local.cloudevents import message_published, object_finalized
from functions.local.platform import LocalRay
from functions.local.workdirs import write_record

log = logging.getLogger(__name__)
BUCKET = "raytune-local"
TICK_S = 0.5  # a tick here is a few ms of local calls: the job's start and end are noticed within half a second
STALLED_S = 600.0  # of ticks failing on transient errors only, before the run is given up
NIGHTLY_AT = dt.time(2, 0)  # when the simulated scheduler fires (UTC)


class ConsolePublisher:
    """Run-finished events go to the console locally (Pub/Sub in the cloud)."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def publish(self, topic: str, message: dict[str, Any], **attributes: str) -> str:
        # The state lines and the summary say the state and why: this says only that the event went.
        if attributes.get("event") != "run-state":
            self.say(f"event -> {topic}: {attributes.get('event', 'event')}")
        if promotion := message.get("promotion"):
            self.say(f"  champion: {Promotion.model_validate(promotion).describe()}")
        return "local"


class Eventing:
    """The cloud's eventing for one `raytune local` run: the launch and watch handlers driven by hand, as Eventarc,
    Pub/Sub and Cloud Scheduler drive them in the cloud."""

    def __init__(self, ctx: Context, platform: LocalRay, workdir: Path, say: Callable[[str], None]):
        self.ctx, self.platform, self.workdir, self.say = ctx, platform, workdir, say
        self.story = Story()

    def settle_earlier_runs(self) -> None:
        """Runs an earlier `raytune local` of this workdir left live (it was killed): their cluster is gone,
        so they are cancelled, never revived."""
        for record in self.ctx.store.active(now=self.ctx.clock()):
            was = record.state
            if not was.terminal:
                watch.request_cancel(self.ctx, record.run_id, "its raytune local ended before it did")
            ended = steps.run(
                self.ctx, self.ctx.store.get(record.run_id) or record, Facts(now=self.ctx.clock(), created=True)
            )
            write_record(self.workdir, ended)
            self.say(f"earlier run {record.run_id} left {was.value}: now {ended.state.value}")

    def launch(self, config: Path, night: dt.date | None = None) -> RunRecord:
        """Upload the config and deliver its event: the upload's (configs/) or, for a night, the scheduler's
        nightly launch message naming the config in the library (library/), published at 02:00 that night."""
        from functions.adapters.gcs import storage_client

        blob = storage_client().bucket(BUCKET).blob(f"{'library' if night else 'configs'}/{config.name}")
        blob.upload_from_string(config.read_bytes())
        self.say(f"uploaded {config} as gs://{BUCKET}/{blob.name}#{blob.generation}")
        if night:
            body = {"config_uri": f"gs://{BUCKET}/{blob.name}", "nightly": True}
            published = dt.datetime.combine(night, NIGHTLY_AT, tzinfo=dt.UTC)
            self.say(f"nightly launch message for the night of {night}")
            event = message_published(body, uuid.uuid4().hex, published=published)
        else:
            event = object_finalized(BUCKET, blob.name, blob.generation, blob.size, blob.time_created)
        asked = self.ctx.clock()
        self.say("launch: validating the config...")  # the platform says when it starts the head and the nodes
        record = launch.handle(event, self.ctx)
        assert record is not None, "a configs/ upload is never ignored"
        for line in self.story.observe(record, now=time.monotonic()):
            self.say(line)
        if hint := retry_hint(record, asked, self.workdir):
            self.say(hint)
        if not record.state.terminal:
            self.say(f"worker group: {self.platform.node_count} nodes")
        return record

    def retry(self, run_id: str) -> RunRecord:
        """The next attempt of an ended run of this workdir, as a retry message would ask for it."""
        current = self.ctx.store.get(run_id)
        if current is None:
            raise RuntimeError(f"no run {run_id} in {self.workdir}")
        try:
            current.retried(self.ctx.clock(), "raytune retry")  # refused here with its reason, before any change
        except RetryRefused as why:
            raise RuntimeError(str(why)) from None
        record = watch.request_retry(self.ctx, run_id, "raytune retry")
        assert record is not None, "checked just before"
        self.say(f"retry: run {run_id} attempt {record.attempt} is {record.state.value} ({record.reason})")
        return record

    def follow(self, launched: RunRecord) -> RunRecord:
        """Tick until the run is settled. A tick that meets a transient error (a busy dashboard, a slow
        bucket) is tried again, as Pub/Sub would redeliver; STALLED_S of nothing but such errors ends it."""
        run_id = launched.run_id
        failing_since: float | None = None
        while True:
            try:
                watch.handle(message_published({"kind": "tick"}, uuid.uuid4().hex), self.ctx)
                failing_since = None
            except Exception as exc:
                failing_since = failing_since or time.monotonic()
                if not is_transient(exc) or time.monotonic() - failing_since > STALLED_S:
                    raise
                log.warning("tick failed, tried again: %s", describe(exc))
            record = self.ctx.store.get(run_id)
            assert record is not None
            for line in self.story.observe(record, self.platform.job_logs(record.job_name), time.monotonic()):
                self.say(line)
            if record.settled:
                after = " (scaled down after the run)" if record.reached_cluster else ""
                self.say(f"worker group: {self.platform.node_count} nodes{after}")
                return record
            time.sleep(TICK_S)

    def cancel(self, run_id: str, why: str) -> RunRecord | None:
        """Cancel through the same decisions as a cancel message: stop the job, record, settle."""
        watch.request_cancel(self.ctx, run_id, why)
        record = self.ctx.store.get(run_id)
        if record is None:
            return None
        return steps.run(self.ctx, record, Facts(now=self.ctx.clock(), created=True))


def retry_hint(record: RunRecord, asked: dt.datetime, workdir: Path) -> str | None:
    """For a launch that found its run ended before it was asked (a night run again: the day's id is taken), how
    to start that run's next attempt instead."""
    if record.state not in RETRYABLE or not record.settled or record.created_at >= asked:
        return None
    return (
        f"{record.run_id} ran before and is {record.state.value}: `raytune retry {record.run_id} --workdir {workdir}` "
        "starts its next attempt (from its last checkpoint, if it saved one)"
    )


def newest_run(local: Eventing) -> str | None:
    """The run this process created if the interrupt came before `launch` returned."""
    live = [r for r in local.ctx.store.active() if not r.state.terminal]
    return live[-1].run_id if live else None
