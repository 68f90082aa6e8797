"""`raytune local`: the embedded local default. The same launch and watch handlers, on this machine:
the bucket is fake-gcs-server (run records, the uploaded config), the cluster a local Ray cluster
(functions/local/platform.py), checkpoints a folder, the model the tiny Gemma 3 (or a hub model on a
GPU workstation).

A workdir holds one local environment (bucket, checkpoints, logs, records) and serves one run at a
time; a second `raytune local` at once takes the next free default workdir. Ctrl-C or SIGTERM at any
moment cancels the run, stops every process it started and exits 130/143.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from functions.core.config_file import config_format, parse_config
from functions.local import session
from functions.local.interrupts import Interrupted, Interrupts
from functions.local.platform import check_fits, machine_gpus
from functions.local.services import RunServices
from functions.local.workdirs import (
    DEFAULT_WORKDIR,
    candidates,
    controller_log,
    held_if_free,
    holder,
    passed_over,
    workdir_lock,
)

QUICKSTART = Path(__file__).with_name("quickstart.json")


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


def stop_warm(requested: Path | None) -> int:
    """`raytune local --stop`: the warm local cluster of the workdir stopped now (never one a run is using)."""
    workdir = (requested or DEFAULT_WORKDIR).resolve()
    if not (workdir / ".lock").exists():
        print(f"nothing runs in {workdir}")
        return 0
    with held_if_free(workdir) as held:
        if not held:
            print(f"{workdir} is in use by a run (pid {holder(workdir)}): it stops or keeps its cluster when it ends")
            return 1
        stopped = session.stop(workdir)
    print(
        f"stopped the local Ray cluster of {workdir} ({len(stopped)} processes)"
        if stopped
        else f"nothing runs in {workdir}"
    )
    return 0


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


def run(
    config_path: str | None,
    workdir: Path | None = None,
    as_json: bool = False,
    night: dt.date | None = None,
    retry: str | None = None,
    settle_only: bool = False,
    timings: bool = False,
    keep_warm_s: float | None = None,
) -> int:
    """`raytune local [CONFIG] [--nightly [--night DATE]] [--timings] [--keep-warm S]`: upload the config, launch,
    follow to the end; print a summary (or the record as JSON) and write the record to a file. Exit 0 when the run succeeded
    (or, a nightly, was skipped: nothing new to learn). `retry`: instead, the next attempt of that ended run
    of the workdir (`raytune retry RUN --local`), followed the same way. `settle_only`: only what a raytune local
    that died left (its processes stopped, its runs cancelled: `raytune cancel` of an orphaned run)."""
    config = Path(config_path) if config_path else QUICKSTART
    # One rule for `raytune local` and `retry`: a run that ended on its own, whatever its outcome, leaves its head warm
    # (for how long: as given, else session.keep_warm_for's rule).
    keep_warm_s = session.keep_warm_default() if keep_warm_s is None else keep_warm_s
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
            for note in passed_over(workdir, held):
                say(note)
            return _run(config, held, say, interrupts, as_json, night, retry, settle_only, timings, keep_warm_s)
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
    keep_warm_s: float | None = 0,
) -> int:
    with RunServices(workdir, say, keep_warm_s) as ran:

        def start_and_follow() -> None:
            eventing = ran.start(night)
            if settle_only:
                return
            ran.record = eventing.retry(retry) if retry else eventing.launch(config, night)
            ran.record = eventing.follow(ran.record)

        failure, interrupted = interrupts.guard(start_and_follow)
        code = ran.conclude(failure, interrupted)
    if ran.record is None:
        if failure is not None:
            raise failure  # nothing was launched: the CLI prints the error
        return code
    ran.report(as_json, timings)
    return code
