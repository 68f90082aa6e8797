"""What one `raytune local` starts, and its end: fake-gcs-server for the bucket and the local Ray cluster (the
workdir's session: every process carries its tag), the handlers' context over them; then, however the run ended
(its own end, a failure, a signal, a cancel from another terminal), the run cancelled where it must be, everything
stopped by the context manager's exit, and the record written and summed up."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from functions.adapters.store import RunStore
from functions.core import tracking
from functions.core.errors import describe
from functions.core.policy import Policy
from functions.core.runs import RunRecord, State
from functions.core.secrets import add_secret
from functions.core.story import exit_code, summary
from functions.handlers.context import Context
from functions.handlers.settings import Settings
from functions.local import emulators, session
from functions.local.eventing import BUCKET, ConsolePublisher, Eventing, newest_run
from functions.local.interrupts import Interrupted
from functions.local.platform import NO_CAPACITY_ENV, LocalRay
from functions.local.workdirs import cancel_asked, write_record

log = logging.getLogger(__name__)
EVENTS_TOPIC = "local/run-events"
LOCAL_RETRY_BACKOFF_S = 2  # a local node lost is a process that died, not a reclaimed VM that rarely comes back
SIMULATED_NIGHTS_S = 10 * 365 * 86400


class RunServices:
    """Owns what the run starts: `start` brings it up, leaving the context manager stops it all (the job's driver
    log kept, the cluster shut down, fake-gcs-server stopped, any process of the session swept)."""

    def __init__(self, workdir: Path, say: Callable[[str], None], keep_warm_s: float | None = 0) -> None:
        self.workdir, self.say = workdir, say
        # after a clean end, the head stays up this long for the workdir's next run (None: session.keep_warm_for)
        self.keep_warm_s = keep_warm_s
        self.iterating = False  # this run follows the workdir's last one closely (session.iterating)
        self.clean = False  # the run ended on its own (no failure, no signal): its head may stay warm
        self.tag = uuid.uuid4().hex
        self.started = time.monotonic()
        self.gcs: emulators.Service | None = None
        self.platform: LocalRay | None = None
        self.eventing: Eventing | None = None
        self.record: RunRecord | None = None

    def __enter__(self) -> RunServices:
        return self

    def start(self, night: dt.date | None) -> Eventing:
        """What a run needs, brought up: what a killed raytune local of this workdir left stopped first, then the
        bucket and the cluster, and the earlier runs it left live settled."""
        warm = session.warm(self.workdir)
        self.iterating = session.iterating(self.workdir, warm is not None, time.time())
        if warm is not None:
            self.tag = warm.tag  # what this run starts belongs to the warm session, and is stopped with it
            self.say(f"reusing the warm local Ray cluster an earlier run left (head pid {warm.head_pid})")
        elif orphans := session.stop(self.workdir):
            self.say(f"stopped {len(orphans)} processes an earlier raytune local of this workdir left")
        starved = [r.strip() for r in os.environ.get(NO_CAPACITY_ENV, "").split(",") if r.strip()]
        # starts nothing yet; marks the session in use first
        self.platform = LocalRay.claimed(self.workdir, self.tag, no_capacity=starved, warm=warm)
        logs = self.workdir / "logs"
        self.gcs = emulators.fake_gcs(
            logs / "fake-gcs.log", data_dir=self.workdir / "gcs", env={emulators.TAG: self.tag}
        )
        os.environ["STORAGE_EMULATOR_HOST"] = self.gcs.url
        from functions.adapters.gcs import Bucket, storage_client

        client = storage_client()
        if client.lookup_bucket(BUCKET) is None:
            client.create_bucket(BUCKET)
        checkpoints = self.workdir / "checkpoints"
        self.say(f"workdir {self.workdir}: bucket gs://{BUCKET} on fake-gcs-server, checkpoints in {checkpoints}")
        settings = Settings(
            project="local",
            bucket=BUCKET,
            watch_topic=None,
            events_topic=EVENTS_TOPIC,
            # A night given by date stands for the scheduler's message of that night, however long ago.
            max_event_age_s=SIMULATED_NIGHTS_S if night else 3600,
            hf_token=os.environ.get("HF_TOKEN") or None,
            checkpoints=str(checkpoints),
            policy=Policy.unrestricted(),
            retry_backoff_s=LOCAL_RETRY_BACKOFF_S,
            tracking_credentials={name: os.environ[name] for name in tracking.CREDENTIALS if os.environ.get(name)},
        )
        for secret in (settings.hf_token, *settings.tracking_credentials.values()):
            add_secret(secret)  # the run's processes have them from this shell; what it says never does
        publisher = ConsolePublisher(self.say)
        ctx = Context(settings=settings, store=RunStore(Bucket(BUCKET)), platform=self.platform, publisher=publisher)
        self.eventing = Eventing(ctx, self.platform, self.workdir, self.say)
        self.eventing.settle_earlier_runs()
        return self.eventing

    def conclude(self, failure: BaseException | None, interrupted: Interrupted | None) -> int:
        """The exit code, once the run stopped following: its outcome, or the run cancelled (and why) when a
        failure or a signal cut it short; a signal after its end leaves the outcome as it stands."""
        why, code = None, 0
        ended = self._ended() if interrupted is not None else None
        if ended is not None:
            self.say(f"interrupted ({interrupted}) after the run ended (its outcome stands): stopping what it started")
            self.record, code = ended, exit_code(ended.state)
        elif interrupted is not None and (asked := cancel_asked(self.workdir)) is not None:
            why, code = asked, exit_code(State.CANCELLED)  # `raytune cancel` from another terminal: a cancel
        elif interrupted is not None:
            why, code = f"interrupted ({interrupted})", 128 + interrupted.signum
        elif failure is not None:
            why, code = f"raytune local failed: {describe(failure)}", 1
            log.error("%s", why, exc_info=failure)
        elif self.record is not None:
            code = exit_code(self.record.state)
            self.clean = True
        if why is not None:
            self.say(f"{why}: cancelling the run and stopping what it started")
            self._cancel(why)
        return code

    def _ended(self) -> RunRecord | None:
        """The run as stored, if it had ended and settled (its end published) by the time a signal came."""
        if self.eventing is None or self.record is None:
            return None
        current = self.eventing.ctx.store.get(self.record.run_id)
        return current if current is not None and current.state.terminal and current.settled else None

    def _cancel(self, why: str) -> None:
        run_id = self.record.run_id if self.record else newest_run(self.eventing) if self.eventing else None
        if self.eventing is None or not run_id:
            return
        try:
            self.record = self.eventing.cancel(run_id, why) or self.record
        except Exception as again:  # the platform that failed may fail again: the record says why
            log.error("cancelling %s: %s", run_id, describe(again))

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        warm = None
        keep_warm_s = session.keep_warm_for(self.keep_warm_s, self.iterating)
        if self.platform is not None:
            session.run_ended(self.workdir)
            if self.record is not None:
                self.platform.save_job_log(self.record.job_name)
            if self.clean and error is None and keep_warm_s > 0:
                with self.platform.cluster.timed("stopping the worker nodes"):
                    warm = self.platform.left_warm()
            if warm is None:
                with self.platform.cluster.timed("stopping the cluster"):
                    self.platform.shutdown()
        if self.gcs is not None:
            self.gcs.stop()
        if warm is not None:
            session.keep_warm(self.workdir, warm, keep_warm_s)
            why = "" if self.keep_warm_s is not None else (" (you are iterating)" if self.iterating else " (a rerun's)")
            self.say(
                f"the local Ray cluster stays up {keep_warm_s:.0f}s{why} for the next run of {self.workdir} "
                f"(`raytune local --stop --workdir {self.workdir}` stops it now)"
            )
            return
        leftovers = session.stop(self.workdir)
        if leftovers:  # Ray processes that left their node's process group: expected, logged, not shown
            log.info("stopped %d leftover processes of this run: %s", len(leftovers), leftovers)

    def report(self, as_json: bool, timings: bool) -> None:
        """The ended run: its record written to the workdir, its summary said (the record printed with --json,
        where a terminal that went cannot take it: the file has it), and where its time went (--timings)."""
        assert self.record is not None
        path = write_record(self.workdir, self.record)
        for line in summary(self.record, time.monotonic() - self.started, str(path)):  # on stderr with --json
            self.say(line)
        if as_json:
            with contextlib.suppress(OSError):
                print(self.record.model_dump_json(indent=2), flush=True)
        if timings:
            assert self.platform is not None, "a run was launched on it"
            for line in timeline(self.record, self.platform.timings, time.monotonic() - self.started):
                self.say(line)


def timeline(record: RunRecord, local: dict[str, float], wall_s: float) -> list[str]:
    """`raytune local --timings`: where the run's wall time went, the local cluster's own start and stop first,
    then the record's timings (its states, then the job's phases inside RUNNING)."""
    rows = [(f"local: {what}", seconds) for what, seconds in local.items()] + list(record.timings.items())
    width = max((len(name) for name, _ in rows), default=0)
    lines = [f"timeline of {record.run_id} ({wall_s:.1f}s in all; job phases run inside RUNNING):"]
    lines += [f"  {name.ljust(width)}  {seconds:6.1f}s" for name, seconds in rows]
    return lines
