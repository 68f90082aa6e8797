"""`raytune local`: the embedded local default. The same launch and watch handlers, on this machine:
the bucket is fake-gcs-server (run records, the uploaded config), the cluster a local Ray cluster
(functions/local/platform.py), checkpoints a folder, the model the tiny Gemma 3 (or a hub model on a
GPU workstation).

A workdir holds one local environment (bucket, checkpoints, logs, records) and serves one run at a
time; a second `raytune local` at once takes the next free default workdir. Ctrl-C or SIGTERM at any
moment cancels the run, stops every process it started and exits 130/143.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from functions.adapters.store import RunStore
from functions.core.champion import Promotion
from functions.core.config_file import config_format, parse_config
from functions.core.decide import Facts
from functions.core.errors import RetryRefused, describe, is_transient
from functions.core.policy import Policy
from functions.core.runs import RETRYABLE, RunRecord, State
from functions.core.story import Story, exit_code, summary
from functions.handlers import launch, steps, watch
from functions.handlers.context import Context
from functions.handlers.settings import Settings
from functions.local import emulators, session
from functions.local.cloudevents import message_published, object_finalized
from functions.local.interrupts import Interrupted, Interrupts
from functions.local.platform import LocalRay, check_fits, machine_gpus

log = logging.getLogger(__name__)
BUCKET = "raytune-local"
EVENTS_TOPIC = "local/run-events"
TICK_S = 0.5  # a tick here is a few ms of local calls: the job's start and end are noticed within half a second
LOCAL_RETRY_BACKOFF_S = 2
STALLED_S = 600.0  # of ticks failing on transient errors only, before the run is given up
QUICKSTART = Path(__file__).with_name("quickstart.json")
DEFAULT_WORKDIR = Path(".raytune/local")
CANCEL_NOTE = "cancel-request.json"  # in the workdir: who asked the raytune local holding it to cancel its run
NIGHTLY_AT = dt.time(2, 0)  # when the simulated scheduler fires (UTC)
SIMULATED_NIGHTS_S = 10 * 365 * 86400


class Console:
    """One line per event, with the time since start; everything else goes to the log files."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        try:
            print(f"[{time.monotonic() - self.started:6.1f}s] {text}", file=self.out, flush=True)
        except OSError:  # the terminal is gone (SIGHUP): the clean-up goes on, the record and logs say the rest
            self.out = open(os.devnull, "w")  # noqa: SIM115 - for the rest of the run


class OneLine(logging.Formatter):
    """A warning on the terminal is its message; its traceback is in logs/controller.log."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


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


@contextlib.contextmanager
def controller_log(workdir: Path) -> Iterator[None]:
    """The controller's own INFO log (every transition and sizing) into logs/controller.log for the run."""
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(workdir / "logs" / "controller.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("functions").addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger("functions").removeHandler(handler)
        handler.close()


def holder(workdir: Path) -> int | None:
    """The pid of the raytune local holding `workdir`, proven by its lock (a pid read from the file alone proves
    nothing: its process may be dead and the pid reused); None when none holds it; 0 while one is taking it."""
    lock = workdir / ".lock"
    if not lock.is_file():
        return None
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def candidates(requested: Path | None) -> list[Path]:
    """The workdirs a run may take: the one asked for, else the default and the next free .raytune/local-N."""
    return [requested] if requested else [DEFAULT_WORKDIR, *(Path(f"{DEFAULT_WORKDIR}-{n}") for n in range(2, 10))]


def detach(args: list[str], requested: Path | None, wait_s: float = 180) -> int:
    """`raytune local ... --detach`: the same run in a process of its own session (no terminal: closing this one
    does nothing to it), its console in <workdir>/logs/console.log; returns once its run is launched, naming the
    run and how to follow it from any terminal."""
    free = [w.resolve() for w in candidates(requested) if holder(w.resolve()) is None]
    if not free:
        raise RuntimeError(f"{requested or 'every default workdir'} is in use by another raytune local")
    workdir = free[0]
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    console = workdir / "logs" / "console.log"
    start = console.stat().st_size if console.exists() else 0
    raytune = Path(sys.executable).parent / "raytune"
    with open(console, "ab") as out:
        proc = subprocess.Popen(
            [str(raytune), "local", *args, "--workdir", str(workdir)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        text = console.read_bytes()[start:].decode(errors="replace")
        # the first line naming the run's state: "run X: SUBMITTED (...)", or its summary "run X REJECTED in ..."
        if launched := re.search(r"\] run (\S+?):? ([A-Z]+)\b", text):
            run_id = launched[1]
            print(f"run {run_id} is {launched[2]} in the background (pid {proc.pid}), in {workdir}")
            print(f"  raytune status {run_id} --workdir {workdir}    raytune logs {run_id} -f --workdir {workdir}")
            print(f"  raytune cancel {run_id} --workdir {workdir}    its console: {console}")
            return 0
        if proc.poll() is not None:
            sys.stderr.write(text[-4000:])
            return proc.returncode or 1
        time.sleep(0.2)
    print(f"raytune local is starting in the background (pid {proc.pid}), in {workdir}; its console: {console}")
    return 0


@contextlib.contextmanager
def workdir_lock(requested: Path | None) -> Iterator[Path]:
    """Hold the workdir for this run. The default one taken by a run in progress: the next free
    `.raytune/local-N`; an explicit one: an error naming who holds it."""
    for workdir in candidates(requested):
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        handle = open(workdir / ".lock", "a+")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            if requested:
                raise RuntimeError(
                    f"{workdir} is in use by another raytune local (pid {holder}); "
                    "pass another --workdir to run both at once"
                ) from None
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield workdir
        finally:
            handle.close()
        return
    raise RuntimeError("every default workdir is in use; pass --workdir")


def timeline(record: RunRecord, local: dict[str, float], wall_s: float) -> list[str]:
    """`raytune local --timings`: where the run's wall time went, the local cluster's own start and stop first,
    then the record's timings (its states, then the job's phases inside RUNNING)."""
    rows = [(f"local: {what}", seconds) for what, seconds in local.items()] + list(record.timings.items())
    width = max((len(name) for name, _ in rows), default=0)
    lines = [f"timeline of {record.run_id} ({wall_s:.1f}s in all; job phases run inside RUNNING):"]
    lines += [f"  {name.ljust(width)}  {seconds:6.1f}s" for name, seconds in rows]
    return lines


class LocalRun:
    """One `raytune local` run: the handlers driven by hand, as Eventarc and the scheduler would."""

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
        self.say("launch: validating the config, then starting the local Ray head and the run's worker nodes...")
        record = launch.handle(event, self.ctx)
        assert record is not None, "a configs/ upload is never ignored"
        for line in self.story.observe(record):
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
            for line in self.story.observe(record, self.platform.job_logs(record.job_name)):
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


def run(
    config_path: str | None,
    workdir: Path | None = None,
    as_json: bool = False,
    night: dt.date | None = None,
    retry: str | None = None,
    settle_only: bool = False,
    timings: bool = False,
) -> int:
    """`raytune local [CONFIG] [--nightly [--night DATE]] [--timings]`: upload the config, launch, follow to the end;
    print a summary (or the record as JSON) and write the record to a file. Exit 0 when the run succeeded
    (or, a nightly, was skipped: nothing new to learn). `retry`: instead, the next attempt of that ended run
    of the workdir (`raytune retry RUN --local`), followed the same way. `settle_only`: only what a raytune local
    that died left (its processes stopped, its runs cancelled: `raytune cancel` of an orphaned run)."""
    config = Path(config_path) if config_path else QUICKSTART
    if retry is None and not settle_only:
        cfg = parse_config(config.read_bytes(), config_format(config.name))
        if cfg.scaling.use_gpu:
            check_fits(cfg, machine_gpus())
    # The terminal gets the console's lines and the controller's warnings; its INFO log goes to logs/controller.log.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)
        handler.setFormatter(OneLine())
    logging.getLogger("functions").setLevel(logging.INFO)
    say = Console(sys.stderr if as_json else sys.stdout)
    # Installed before the workdir is taken and kept until the record is printed and the lock let go:
    # a signal at any moment either cancels the run or, once the clean-up has begun, waits for it.
    try:
        with Interrupts(say) as interrupts, workdir_lock(workdir) as held, controller_log(held):
            return _run(config, held, say, interrupts, as_json, night, retry, settle_only, timings)
    except Interrupted as exc:  # raised only before _run's clean-up guard: nothing was started
        say(f"interrupted ({exc}) before the run started")
        return 128 + exc.signum


def _run(
    config: Path,
    workdir: Path,
    say: Console,
    interrupts: Interrupts,
    as_json: bool,
    night: dt.date | None,
    retry: str | None,
    settle_only: bool = False,
    timings: bool = False,
) -> int:
    tag = uuid.uuid4().hex
    started = time.monotonic()
    gcs: emulators.Service | None = None
    platform: LocalRay | None = None
    local: LocalRun | None = None
    record: RunRecord | None = None

    def start_and_follow() -> None:
        nonlocal gcs, platform, local, record
        if orphans := session.stop(workdir):
            say(f"stopped {len(orphans)} processes an earlier raytune local of this workdir left")
        platform = LocalRay(workdir, tag)  # starts nothing yet; records the session's tag first
        gcs = emulators.fake_gcs(workdir / "logs" / "fake-gcs.log", data_dir=workdir / "gcs", env={emulators.TAG: tag})
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        from functions.adapters.gcs import Bucket, storage_client

        client = storage_client()
        if client.lookup_bucket(BUCKET) is None:
            client.create_bucket(BUCKET)
        checkpoints = workdir / "checkpoints"
        say(f"workdir {workdir}: bucket gs://{BUCKET} on fake-gcs-server, checkpoints in {checkpoints}")
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
            # A local node lost is a process that died, not a reclaimed VM that rarely comes back at once.
            retry_backoff_s=LOCAL_RETRY_BACKOFF_S,
        )
        ctx = Context(
            settings=settings, store=RunStore(Bucket(BUCKET)), platform=platform, publisher=ConsolePublisher(say)
        )
        local = LocalRun(ctx, platform, workdir, say)
        local.settle_earlier_runs()
        if settle_only:
            return
        record = local.retry(retry) if retry else local.launch(config, night)
        record = local.follow(record)

    failure, interrupted = interrupts.guard(start_and_follow)
    try:
        why = None
        ended = _ended(local, record) if interrupted is not None else None
        if ended is not None:  # the signal came after the run's end: nothing to cancel, its outcome stands
            say(f"interrupted ({interrupted}) after the run ended (its outcome stands): stopping what it started")
            record = ended
            code = exit_code(ended.state)
        elif interrupted is not None and (asked := cancel_asked(workdir)) is not None:
            why, code = asked, exit_code(State.CANCELLED)  # `raytune cancel` from another terminal: a cancel
        elif interrupted is not None:
            why, code = f"interrupted ({interrupted})", 128 + interrupted.signum
        elif failure is not None:
            why, code = f"raytune local failed: {describe(failure)}", 1
            log.error("%s", why, exc_info=failure)
        if why is not None:
            say(f"{why}: cancelling the run and stopping what it started")
            run_id = record.run_id if record else _newest_run(local) if local else None
            if local is not None and run_id:
                try:
                    record = local.cancel(run_id, why) or record
                except Exception as again:  # the platform that failed may fail again: the record says why
                    log.error("cancelling %s: %s", run_id, describe(again))
        elif record is None:
            assert settle_only, "a run was launched"
            code = 0
        else:
            code = exit_code(record.state)
    finally:
        if platform is not None:
            if record is not None:
                platform.save_job_log(record.job_name)
            with platform.timed("stopping the cluster"):
                platform.shutdown()
        if gcs is not None:
            gcs.stop()
        leftovers = session.stop(workdir)
        if leftovers:  # Ray processes that left their node's process group: expected, logged, not shown
            log.info("stopped %d leftover processes of this run: %s", len(leftovers), leftovers)
    if record is None:
        if failure is not None:
            raise failure  # nothing was launched: the CLI prints the error
        return code
    path = write_record(workdir, record)
    for line in summary(record, time.monotonic() - started, str(path)):  # on stderr with --json
        say(line)
    if as_json:
        with contextlib.suppress(OSError):  # a terminal that went (SIGHUP): the record file has it
            print(record.model_dump_json(indent=2), flush=True)
    if timings:
        assert platform is not None, "a run was launched on it"
        for line in timeline(record, platform.timings, time.monotonic() - started):
            say(line)
    return code


def ask_cancel(workdir: Path, pid: int, by: str) -> None:
    """`raytune cancel` of the run a raytune local (pid) follows: the reason noted for it, then its interrupt."""
    (workdir / CANCEL_NOTE).write_text(json.dumps({"pid": pid, "by": by}))
    os.kill(pid, signal.SIGINT)


def cancel_asked(workdir: Path) -> str | None:
    """Why this process was interrupted, when `raytune cancel` asked it to (the note names this process)."""
    note = workdir / CANCEL_NOTE
    try:
        asked = json.loads(note.read_text())
        note.unlink()
    except (OSError, ValueError):
        return None
    return str(asked.get("by")) if isinstance(asked, dict) and asked.get("pid") == os.getpid() else None


def retry_hint(record: RunRecord, asked: dt.datetime, workdir: Path) -> str | None:
    """For a launch that found its run ended before it was asked (a night run again: the day's id is taken), how
    to start that run's next attempt instead."""
    if record.state not in RETRYABLE or not record.settled or record.created_at >= asked:
        return None
    return (
        f"{record.run_id} ran before and is {record.state.value}: `raytune retry {record.run_id} --workdir {workdir}` "
        "starts its next attempt from its last checkpoint"
    )


def _ended(local: LocalRun | None, record: RunRecord | None) -> RunRecord | None:
    """The run as stored, if it had ended and settled (its end published) by the time a signal came."""
    if local is None or record is None:
        return None
    current = local.ctx.store.get(record.run_id)
    return current if current is not None and current.state.terminal and current.settled else None


def write_record(workdir: Path, record: RunRecord) -> Path:
    path = workdir / "records" / f"{record.run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=2))
    return path


def _newest_run(local: LocalRun) -> str | None:
    """The run this process created if the interrupt came before `launch` returned."""
    live = [r for r in local.ctx.store.active() if not r.state.terminal]
    return live[-1].run_id if live else None
