"""The operator commands: submit, runs, status, logs, cancel, compare. The same commands on the deployed
controller and on a `raytune local` workdir (functions/cli/backends.py); tables through rich."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from functions.cli import options, tokens
from functions.cli import settings as cli_settings
from functions.cli.backends import Backend, CloudBackend, LocalBackend, RetryEnded, records
from functions.cli.checks import placeholders
from functions.core import joblog
from functions.core.errors import RetryRefused
from functions.core.runs import RunRecord, State
from functions.core.story import ORPHANED, STOPPED_FOLLOWING, Story, exit_code, summary
from functions.core.sweep import shown_values

WAIT_LIMIT_S = 120  # cancel waits this long for the record to say CANCELLED
DURATION = re.compile(r"^(\d+)([smhd])$")


def backend_for(args: argparse.Namespace) -> Backend:
    """--local or --workdir DIR: a local workdir; otherwise the deployment the settings name, or (no cloud
    settings at all) the default local workdir, said on stderr so the switch is never silent."""
    if args.local or args.workdir:
        return local_backend(Path(args.workdir) if args.workdir else None)
    found = cli_settings.load({"project": args.project, "runs_bucket": args.bucket})
    if found.cloud:
        return CloudBackend(found)
    backend = local_backend(None)
    print(f"no deployment settings found ({found.source}): reading the local workdir {backend.where}", file=sys.stderr)
    return backend


def deployment_for(args: argparse.Namespace) -> CloudBackend:
    """The deployment the settings name; never the local default in its stead (`submit` would run it here)."""
    found = cli_settings.load({"project": args.project, "runs_bucket": args.bucket})
    if not found.cloud:
        raise RuntimeError(
            f"no deployment to submit to: no runs bucket in {found.source} (RAYTUNE_BUCKET, raytune.toml from "
            f"`terraform output -raw cli_config > raytune.toml`, or --bucket); to run it here: raytune local "
            f"{args.config}"
        )
    return CloudBackend(found)


def local_backend(workdir: Path | None) -> LocalBackend:
    """A local workdir that exists; the default one, or the error lists those `raytune local` made here."""
    backend = LocalBackend(workdir)
    if not backend.workdir.is_dir():
        others = sorted(str(p) for p in Path(".raytune").glob("local*") if p.is_dir())
        hint = f"; workdirs here: {', '.join(others)} (pass one with --workdir)" if others else ""
        raise RuntimeError(f"no raytune local workdir at {backend.where}{hint}")
    return backend


def console() -> Any:
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=True)
    if not out.is_terminal:
        out = Console(highlight=False, soft_wrap=True, width=200)  # pipes and files: no squeezed columns
    return out


def _get(backend: Backend, run_id: str) -> RunRecord:
    record = backend.store.get(run_id)
    if record is None:
        elsewhere = [w for w in local_workdirs() if w != Path(backend.where) and LocalBackend(w).store.get(run_id)]
        hint = f": it is in {elsewhere[0]} (add --workdir {elsewhere[0]})" if elsewhere else ""
        raise RuntimeError(f"no run {run_id} in {backend.where}{hint}")
    return record


def local_workdirs() -> list[Path]:
    """The raytune local workdirs under this folder (.raytune/local, .raytune/local-2, ...)."""
    return sorted(p.resolve() for p in Path(".raytune").glob("local*") if (p / "gcs").is_dir())


def _age(since: dt.datetime, now: dt.datetime) -> str:
    seconds = int((now - since).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _duration(record: RunRecord) -> str:
    start = record.entered(State.SUBMITTED)
    if start is None:
        return "-"
    end = record.updated_at if record.state.terminal else dt.datetime.now(dt.UTC)
    return _age(start, end)


def row(record: RunRecord, now: dt.datetime) -> dict[str, Any]:
    cfg = record.config or {}
    scaling = cfg.get("scaling", {})
    metrics = record.result.metrics if record.result else None
    state = record.state.value + (f" #{record.queue_position}" if record.state == State.QUEUED else "")
    if record.promotion and record.promotion.promoted:
        state += " (champion)"
    return {
        "run_id": record.run_id,
        "name": cfg.get("name", "-"),
        "state": state,
        "age": _age(record.created_at, now),
        "duration": _duration(record),
        "shape": f"{scaling.get('nodes', '-')} x {scaling.get('gpus_per_node') or 'CPU'}" if scaling else "-",
        "best_eval_loss": metrics.best_checkpoint_score
        if metrics and metrics.best_checkpoint_by == "eval_loss"
        else None,
        "gpu_node_hours": round(record.gpu_node_seconds / 3600, 2) if record.gpu_node_seconds else None,
        "estimated_cost": _estimated_cost(record),
        "cost": round(record.cost, 2) if record.cost is not None else None,
        "attempt": record.attempt,
        "capacity": capacity(record.nodes),
    }


def _estimated_cost(record: RunRecord) -> list[float] | None:
    """The cost the run was expected to have before launch: the lowest to the highest of its capacity options."""
    costs = record.estimate.costs.values() if record.estimate else ()
    return [round(min(c[0] for c in costs), 2), round(max(c[1] for c in costs), 2)] if costs else None


def _money(value: float | list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value[0]:.2f}-{value[1]:.2f}" if isinstance(value, list) else f"{value:.2f}"


def capacity(nodes: dict[str, str]) -> str | None:
    """Where a run's nodes came from, counted: '1 spot, 1 reservation a4-res'."""
    counts: dict[str, int] = {}
    for kind in nodes.values():
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or None


def _since(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    match = DURATION.match(text)
    if not match:
        raise RuntimeError(f"--since {text!r}: use e.g. 30m, 6h, 2d")
    size = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
    return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=int(match[1]) * size)


def cmd_runs(args: argparse.Namespace) -> int:
    backends = [LocalBackend(w) for w in local_workdirs()] if args.all_workdirs else [backend_for(args)]
    since = _since(args.since)
    found = [
        (backend, r)
        for backend in backends
        for r in records(backend.store)
        if (not args.state or r.state.value == args.state.upper())
        and (not since or r.created_at >= since)
        and (not args.name or (r.config or {}).get("name") == args.name or r.run_id.startswith(f"{args.name}-"))
    ]
    now = dt.datetime.now(dt.UTC)
    rows = [{**row(r, now), **({"workdir": b.where} if args.all_workdirs else {})} for b, r in found]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.table import Table

    where = "every local workdir here" if args.all_workdirs else backends[0].where
    table = Table(title=f"runs in {where}", title_justify="left")
    columns = (
        "run id", "name", "state", "age", "duration", "nodes x GPUs", "capacity", "best eval loss", "GPU node-h",
        "est. cost", "cost",
    )  # fmt: skip
    numbers = ("age", "duration", "best eval loss", "GPU node-h", "est. cost", "cost")
    for column in columns:
        table.add_column(column, justify="right" if column in numbers else "left")
    for r in rows:
        loss = f"{r['best_eval_loss']:.4f}" if r["best_eval_loss"] is not None else "-"
        hours = f"{r['gpu_node_hours']:.2f}" if r["gpu_node_hours"] is not None else "-"
        state = r["state"] + (f" (attempt {r['attempt']})" if r["attempt"] > 1 else "")
        run = r["run_id"] + (f"\n{r['workdir']}" if args.all_workdirs else "")
        table.add_row(
            run, r["name"], state, r["age"], r["duration"], r["shape"], r["capacity"] or "-", loss, hours,
            _money(r["estimated_cost"]), _money(r["cost"]),
        )  # fmt: skip
    console().print(table)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    record = _get(backend, args.run)
    out = console()
    out.print(f"[bold]{record.run_id}[/bold]  {record.state.value}  ({backend.where})")
    if record.reason:
        out.print(f"  reason     {record.reason}")
    if record.queue_position:
        out.print(f"  queue      position {record.queue_position}")
    for t in record.history:
        out.print(f"  {t.at:%Y-%m-%d %H:%M:%S}  {t.state.value}" + (f"  {t.reason}" if t.reason else ""))
    for node, kind in sorted(record.nodes.items()):
        out.print(f"  node       {node}: {kind}")
    for a in record.attempts:
        held = f", {a.gpu_node_seconds / 3600:.2f} GPU node-h" if a.gpu_node_seconds else ""
        out.print(f"  attempt {a.number}  RayJob {a.job} ({a.by}): {a.outcome or 'current'}{held}")
        for line in a.lost:
            out.print(f"    lost     {line}")
    if record.result:
        from rich.table import Table

        metrics = Table(title="  metrics", title_justify="left", show_header=False, box=None, padding=(0, 2))
        for key, value in record.result.metrics.model_dump(exclude_none=True).items():
            metrics.add_row(f"  {key}", f"{value:.4g}" if isinstance(value, float) else str(value))
        out.print(metrics)
        out.print(f"  adapter    {record.result.adapter_path}")
    try:
        job = backend.job(record)
        pods = backend.pods(record)
        log = backend.log(record)
    except Exception as err:  # the record is the answer; the cluster is news
        out.print(f"  cluster    unreachable: {err}")
        return 0
    if job is None:
        out.print("  RayJob     none")
    for key, value in (job or {}).items():
        out.print(f"  RayJob     {key:<20} {value}", markup=False)
    for pod in pods:
        out.print(f"  pod        {pod}")
    tail = log.strip().splitlines()[-args.lines :] if log.strip() else []
    if tail:
        out.print("  last log lines:")
        for line in tail:
            out.print(f"    {joblog.clean(line)}", markup=False)
    return 0


def _shown(text: str) -> str:
    """Log text as written to stdout: Ray's colour codes only where they colour something (a terminal)."""
    return text if sys.stdout.isatty() else joblog.strip_ansi(text)


def _tail(text: str, lines: int | None) -> str:
    return text if lines is None else "".join(text.splitlines(keepends=True)[-lines:] if lines else [])


def cmd_logs(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    record = _get(backend, args.run)
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
    record = _get(backend, run_id)
    try:
        while True:
            text = backend.log(record)
            if raw:
                shown = 0 if len(text) < shown else shown
                fresh, shown = text[shown:], len(text)
                sys.stdout.write(_shown(_tail(fresh, tail) if first else fresh))
            else:
                told = "".join(f"{line}\n" for line in story.observe(record, text))
                sys.stdout.write(_tail(told, tail) if first else told)
            sys.stdout.flush()
            first = False
            if record.state.terminal:
                break
            if why := backend.orphaned(record):
                print(why)
                return ORPHANED
            time.sleep(interval_s)
            record = _get(backend, run_id)
    except KeyboardInterrupt:
        where = f" --workdir {backend.where}" if isinstance(backend, LocalBackend) else ""
        print(
            f"\nstopped following {run_id}; the run goes on ({record.state.value}). `raytune cancel {run_id}{where}` "
            f"cancels it; `raytune logs -f {run_id}{where}` follows it again.",
            file=sys.stderr,
        )
        return STOPPED_FOLLOWING
    for line in summary(record):
        print(line)
    return exit_code(record.state)


def cmd_cancel(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    record = _get(backend, args.run)
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
    backend = backend_for(args)
    record = _get(backend, args.run)
    try:
        record.retried(dt.datetime.now(dt.UTC), "raytune retry")  # refused here with the reason, before anything
    except RetryRefused as why:
        print(f"error: {why}", file=sys.stderr)
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
        record = _get(backend, args.run)
        if done(record) or time.monotonic() >= deadline:
            return record, done(record)
        time.sleep(args.interval)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def cmd_compare(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise RuntimeError("compare needs two or more run ids (raytune status RUN shows one)")
    backend = backend_for(args)
    runs = [_get(backend, run_id) for run_id in args.runs]
    configs = [_flat(r.config or {}) for r in runs]
    metrics = [_flat(r.result.metrics.model_dump(exclude_none=True) if r.result else {}) for r in runs]
    from rich.table import Table

    table = Table(title="config differences and metrics", title_justify="left")
    table.add_column("")
    for r in runs:
        table.add_column(f"{r.run_id}\n{r.state.value}")
    keys = sorted({k for c in configs for k in c})
    differing = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
    for key in differing:
        table.add_row(key, *(json.dumps(c[key]) if key in c else "-" for c in configs))
    if differing:
        table.add_section()
    for key in sorted({k for m in metrics for k in m}):
        table.add_row(
            key, *(f"{m[key]:.4g}" if isinstance(m.get(key), float) else str(m.get(key, "-")) for m in metrics)
        )
    if any(r.result and r.result.sweep for r in runs):  # a sweep's metrics above are its best trial's
        table.add_row("sweep: best trial", *(_best_trial(r) for r in runs))
    table.add_row("GPU node-h", *(f"{r.gpu_node_seconds / 3600:.2f}" if r.gpu_node_seconds else "-" for r in runs))
    table.add_row("estimated cost", *(_money(_estimated_cost(r)) for r in runs))
    table.add_row("cost", *(_money(r.cost) for r in runs))
    console().print(table)
    if not differing:
        console().print("the configs are the same")
    return 0


def _best_trial(record: RunRecord) -> str:
    sweep = record.result.sweep if record.result else None
    best = next((t for t in sweep.trials if t.trial_id == sweep.best_trial), None) if sweep else None
    if sweep is None or best is None:
        return "-"
    return f"{best.trial_id} of {len(sweep.trials)}: {shown_values(best.params)}"


def cmd_submit(args: argparse.Namespace) -> int:
    config = Path(args.config)
    if args.local or args.workdir:
        from functions.local import driver

        if args.name or args.via_topic:
            raise RuntimeError("--name and --via-topic are the deployment's: a local run is named by its config")
        print(f"submit --local: running {config} on the local default (raytune local)", file=sys.stderr)
        return driver.run(str(config), Path(args.workdir) if args.workdir else None)
    if left := placeholders(str(config)):
        raise RuntimeError("; ".join(left) + ": edit it first (nothing was uploaded)")
    backend = deployment_for(args)
    backend.settings.need("launch_topic" if args.via_topic else "configs_bucket")  # before anything is said
    from functions.core.config_file import config_format, parse_config
    from functions.core.estimate import beyond, estimate

    expected = estimate(parse_config(config.read_bytes(), config_format(config.name)), backend.settings.prices())
    for line in expected.lines():
        print(line, file=sys.stderr)
    if why := beyond(expected, args.max_cost):
        raise RuntimeError(f"not submitted: {why} (--max-cost; nothing was uploaded)")
    run_id = backend.submit(config, args.name, args.via_topic)
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
    submit.add_argument(
        "--max-cost",
        type=float,
        metavar="AMOUNT",
        help="refuse the run (nothing uploaded) when its estimated cost may be above this, or cannot be estimated",
    )
    options.add_set(submit)
    submit.add_argument("--interval", type=float, default=10.0, help=argparse.SUPPRESS)
    submit.set_defaults(func=cmd_submit)

    runs = common(sub.add_parser("runs", help="a table of runs"))
    runs.add_argument(
        "--state",
        choices=[s.value for s in State] + [s.value.lower() for s in State],
        metavar="STATE",
        help="only runs in this state (RUNNING, failed, ...)",
    )
    runs.add_argument("--since", help="only runs created within this long, e.g. 6h, 2d")
    runs.add_argument(
        "--name", help="only runs of this config name, or whose id starts with it (the uploaded object's name)"
    )
    options.add_json(runs, "the rows as JSON")
    runs.add_argument(
        "--all-workdirs", action="store_true", help="the runs of every raytune local workdir here (.raytune/local*)"
    )
    runs.set_defaults(func=cmd_runs)

    status = common(sub.add_parser("status", help="one run: record, RayJob, pods, last log lines"))
    status.add_argument("run", help="the run id (raytune runs lists them)")
    status.add_argument("--lines", type=int, default=10, help="how many of the driver log's last lines")
    status.set_defaults(func=cmd_status)

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
    retry.set_defaults(func=cmd_retry)

    compare = common(sub.add_parser("compare", help="configs' differences and metrics side by side"))
    compare.add_argument("runs", nargs="+", metavar="RUN", help="two or more run ids")
    compare.set_defaults(func=cmd_compare)
