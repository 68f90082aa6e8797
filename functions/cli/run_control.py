"""The operator commands that act on a run and follow it: submit (upload or publish, then follow with --wait),
logs (its story, to the end with -f), cancel and retry (each waits until the record says so). The same on the
deployed controller and on a `raytune local` workdir (functions/cli/targets.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from functions.cli import options, targets, tokens
from functions.cli.backends import Backend, LocalBackend, RetryEnded
from functions.cli.checks import placeholders
from functions.core import joblog
from functions.core.errors import RetryRefused
from functions.core.runs import RunRecord, State
from functions.core.story import ORPHANED, STOPPED_FOLLOWING, Story, exit_code, summary

WAIT_LIMIT_S = 120  # cancel and retry wait this long for the record to say so


def _shown(text: str) -> str:
    """Log text as written to stdout: Ray's colour codes only where they colour something (a terminal), and not
    where the user asked for none (NO_COLOR set to anything but "": https://no-color.org)."""
    coloured = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return text if coloured else joblog.strip_ansi(text)


def _tail(text: str, lines: int | None) -> str:
    return text if lines is None else "".join(text.splitlines(keepends=True)[-lines:] if lines else [])


def cmd_logs(args: argparse.Namespace) -> int:
    backend = targets.backend_for(args)
    record = targets.get_record(backend, args.run)
    if args.follow:
        return follow_run(backend, record.run_id, raw=args.raw, tail=args.tail)
    text = backend.log(record)
    if not text and args.raw:
        print(f"no driver log for {record.run_id} yet ({record.state.value})", file=sys.stderr)
        return 1
    if args.raw:
        sys.stdout.write(_shown(_tail(text, args.tail)))
        return 0
    told = Story().observe(record, text) + (summary(record) if record.state.terminal else [])
    print(_tail("".join(f"{line}\n" for line in told), args.tail), end="")
    return 0


def follow_run(
    backend: Backend, run_id: str, raw: bool = False, tail: int | None = None, interval_s: float = 2.0
) -> int:
    """Follow a run to its end as the foreground `raytune local` tells it (`raw`: its driver log as it is), then
    say how it ended; the exit code is its outcome (story.EXIT_CODES). Ctrl-C stops following, not the run, even
    where this process was started with SIGINT ignored (a background job of a script, and what it starts: Python
    then leaves SIGINT ignored and no KeyboardInterrupt ever comes), as `raytune local` owns its signals too."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _follow_run(backend, run_id, raw, tail, interval_s)
    finally:
        signal.signal(signal.SIGINT, previous)


def _follow_run(backend: Backend, run_id: str, raw: bool, tail: int | None, interval_s: float) -> int:
    story, shown, first = Story(), 0, True
    record: RunRecord | None = None
    try:
        record = targets.get_record(backend, run_id)  # a Ctrl-C already here stops following as well
        while True:
            text = backend.log(record)
            if raw:
                shown = 0 if len(text) < shown else shown
                fresh, shown = text[shown:], len(text)
                sys.stdout.write(_shown(_tail(fresh, tail) if first else fresh))
            else:
                lines = story.observe(record, text, time.monotonic())
                # What was told before this look is the run's past, as it is; what comes while following carries
                # the run's age, as `raytune local`'s foreground carries its own.
                told = "".join(f"{line}\n" if first else f"{_age(record)} {line}\n" for line in lines)
                sys.stdout.write(_tail(told, tail) if first else told)
            sys.stdout.flush()
            first = False
            if record.state.terminal:
                break
            if why := backend.orphaned(record):
                print(why)
                return ORPHANED
            time.sleep(interval_s)
            record = targets.get_record(backend, run_id)
    except KeyboardInterrupt:
        where = f" --workdir {backend.where}" if isinstance(backend, LocalBackend) else ""
        state = f" ({record.state.value})" if record else ""
        print(
            f"\nstopped following {run_id}; the run goes on{state}. `raytune cancel {run_id}{where}` "
            f"cancels it; `raytune logs -f {run_id}{where}` follows it again.",
            file=sys.stderr,
        )
        return STOPPED_FOLLOWING
    for line in summary(record):
        print(line)
    return exit_code(record.state)


def _age(record: RunRecord) -> str:
    """The run's age now, as the foreground's stamp: `[  42.1s]`."""
    return f"[{(dt.datetime.now(dt.UTC) - record.created_at).total_seconds():6.1f}s]"


def cmd_cancel(args: argparse.Namespace) -> int:
    backend = targets.backend_for(args)
    record = targets.get_record(backend, args.run)
    if record.state.terminal:
        print(f"{record.run_id} already ended {record.state.value}: nothing to cancel")
        return 0
    backend.cancel(record, args.token)
    print(f"cancel requested for {record.run_id}; waiting up to {args.timeout}s")
    ended, done = wait_until(backend, args, lambda seen: seen.state.terminal)
    if not done:
        print(f"{ended.run_id} still {ended.state.value} after {args.timeout}s (the watcher acts on its next tick)")
        return 1
    print(f"{ended.run_id}: {ended.state.value}" + (f" ({ended.reason})" if ended.reason else ""))
    return 0 if ended.state == State.CANCELLED else 1


def cmd_retry(args: argparse.Namespace) -> int:
    """The next attempt of an ended run, resuming from its last checkpoint. Locally the driver runs it here to
    its end; in the cloud the watcher queues it (the record says so) and this waits for that."""
    backend = targets.backend_for(args)
    record = targets.get_record(backend, args.run)
    try:
        record.retried(dt.datetime.now(dt.UTC), "raytune retry")  # refused here with the reason, before anything
    except RetryRefused as why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    if (again := record.fails_again()) and not args.force:
        print(f"error: {again}: fix it and submit again, or retry with --force", file=sys.stderr)
        return 2
    if isinstance(backend, LocalBackend):
        try:
            backend.retry(record, args.token)
        except RetryEnded as ended:
            return ended.code
        return 0
    before = record.attempt
    backend.retry(record, args.token)
    print(f"retry requested for {record.run_id} (attempt {before + 1}); waiting up to {args.timeout}s")
    queued, done = wait_until(backend, args, lambda seen: seen.attempt > before)
    if not done:
        print(f"{record.run_id} still on attempt {before} after {args.timeout}s (the watcher acts on the message)")
        return 1
    print(f"{queued.run_id}: {queued.state.value} ({queued.reason})")
    return 0


def wait_until(backend: Backend, args: argparse.Namespace, done: Callable[[RunRecord], bool]) -> tuple[RunRecord, bool]:
    """The run's record read every --interval until `done` holds of it or --timeout seconds pass: the last one
    read, and whether it holds."""
    deadline = time.monotonic() + args.timeout
    while True:
        record = targets.get_record(backend, args.run)
        if done(record) or time.monotonic() >= deadline:
            return record, done(record)
        time.sleep(args.interval)


def cmd_submit(args: argparse.Namespace) -> int:
    config = Path(args.config)
    from functions.cli.local_commands import checked, print_estimate

    if errors := checked(str(config)):  # what can be read from here fails here: nothing is uploaded or started
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return 2
    if args.local or args.workdir:
        from functions.local import command

        if args.name or args.via_topic:
            raise RuntimeError("--name and --via-topic are the deployment's: a local run is named by its config")
        print(f"submit --local: running {config} on the local default (raytune local)", file=sys.stderr)
        print_estimate(str(config))
        return command.run(str(config), Path(args.workdir) if args.workdir else None)
    if left := placeholders(str(config)):
        raise RuntimeError("; ".join(left) + ": edit it first (nothing was uploaded)")
    backend = targets.deployment_for(args)
    backend.settings.need("launch_topic" if args.via_topic else "configs_bucket")  # before anything is said
    from functions.cli.config_commands import priced
    from functions.core.config_file import config_format, parse_config
    from functions.core.estimate import beyond

    expected, lines = priced(backend.settings, parse_config(config.read_bytes(), config_format(config.name)))
    for line in [] if args.json else lines:
        print(line, file=sys.stderr)
    if why := beyond(expected, args.max_cost):
        raise RuntimeError(f"not submitted: {why} (--max-cost; nothing was uploaded)")
    run_id = backend.submit(config, args.name, args.via_topic)
    if args.json:
        print(json.dumps({"run_id": run_id, "estimate": json.loads(expected.model_dump_json())}, indent=2))
    else:
        print(run_id)
    print(f"cancel token kept in {tokens.folder() / run_id} (raytune cancel {run_id} uses it)", file=sys.stderr)
    if not args.wait:
        return 0
    return follow_run(backend, run_id, interval_s=args.interval)


def add_parsers(sub: Any) -> None:
    common = options.add_target
    submit = common(
        sub.add_parser("submit", help="launch a run: upload its config (or publish it) and print the run id")
    )
    options.add_config(submit)
    submit.add_argument("--name", help="run name (the uploaded object's name; run_name of a message)")
    submit.add_argument("--via-topic", action="store_true", help="publish a launch message instead of uploading")
    submit.add_argument("--wait", action="store_true", help="follow the run until it ends")
    options.add_json(submit, "the run id and its estimate as JSON")
    submit.add_argument(
        "--max-cost",
        type=options.amount,
        metavar="AMOUNT",
        help="refuse the run (nothing uploaded) when its estimated cost may be above this, or cannot be estimated",
    )
    options.add_set(submit)
    submit.add_argument("--interval", type=float, default=10.0, help=argparse.SUPPRESS)
    submit.set_defaults(func=cmd_submit)

    logs = common(sub.add_parser("logs", help="the run's story (steps, states, outcome) from its driver log"))
    logs.add_argument("run", help="the run id")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="follow the run to its end; the exit code is its outcome"
    )
    logs.add_argument("--raw", action="store_true", help="the driver log as it is (Ray's and the trainer's output)")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines (then follow, with -f)")
    logs.set_defaults(func=cmd_logs)

    cancel = common(sub.add_parser("cancel", help="cancel a run and wait until its record says so"))
    cancel.add_argument("run", help="the run id")
    cancel.add_argument(
        "--token",
        help="the run's cancel token (default: the one `submit` kept on this machine); operators need none",
    )
    options.add_waiting(cancel, WAIT_LIMIT_S, "seconds to wait for CANCELLED")
    cancel.set_defaults(func=cmd_cancel)

    retry = common(
        sub.add_parser("retry", help="start the next attempt of a FAILED or CANCELLED run, from its last checkpoint")
    )
    retry.add_argument("run", help="the run id")
    retry.add_argument("--token", help="the run's cancel token (default: the one `submit` kept); operators need none")
    options.add_waiting(retry, WAIT_LIMIT_S, "how long to wait for the watcher")
    retry.add_argument("--force", action="store_true", help="retry a run that failed on its data or preflight")
    retry.set_defaults(func=cmd_retry)
