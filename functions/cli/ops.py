"""The operator commands that read runs: runs (a table), status (one run), compare. The same on the deployed
controller and on a `raytune local` workdir (functions/cli/backends.py); tables through rich."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from typing import Any

from functions.cli import narrow, options, targets
from functions.cli.backends import LocalBackend, records
from functions.core import joblog
from functions.core.runs import RunRecord, State
from functions.core.story import Story, tracking_lines, where
from functions.core.sweep import shown_values, trial_lines

DURATION = re.compile(r"^(\d+)([smhd])$")


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
    backends = [LocalBackend(w) for w in targets.local_workdirs()] if args.all_workdirs else [targets.backend_for(args)]
    since = _since(args.since)
    found = [
        (backend, r)
        for backend in backends
        for r in records(backend.store)
        if (not args.state or r.state.value == args.state.upper())
        and (not since or r.created_at >= since)
        and (not args.name or (r.config or {}).get("name") == args.name or r.run_id.startswith(f"{args.name}-"))
    ]
    found.sort(key=lambda pair: pair[1].created_at, reverse=True)  # newest first, across workdirs too
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
    cells = []
    for r in rows:
        loss = f"{r['best_eval_loss']:.4f}" if r["best_eval_loss"] is not None else "-"
        hours = f"{r['gpu_node_hours']:.2f}" if r["gpu_node_hours"] is not None else "-"
        state = r["state"] + (f" (attempt {r['attempt']})" if r["attempt"] > 1 else "")
        run = r["run_id"] + (f"\n{r['workdir']}" if args.all_workdirs else "")
        cells.append(
            [
                run, r["name"], state, r["age"], r["duration"], r["shape"], r["capacity"] or "-", loss, hours,
                _money(r["estimated_cost"]), _money(r["cost"]),
            ]
        )  # fmt: skip
    out = targets.console()
    shown = fitting(columns, cells, out.width)
    for column in shown:
        # The run id is what every other command takes: never cut, never wrapped (other columns go first).
        whole = column == "run id"
        table.add_column(column, justify="right" if column in numbers else "left", no_wrap=whole, overflow="fold")
    for row_cells in cells:
        table.add_row(*(cell for column, cell in zip(columns, row_cells, strict=True) if column in shown))
    out.print(table)
    if hidden := [c for c in columns if c not in shown]:
        print(f"({out.width} columns: {', '.join(hidden)} not shown; --json has every field)", file=sys.stderr)
    return 0


# What a narrow terminal loses first (after the columns with nothing in them), as `kubectl get` keeps its wide
# columns for -o wide; the name before what the run did, since the run id starts with it.
DROPPED_FIRST = (
    "capacity", "est. cost", "cost", "GPU node-h", "nodes x GPUs", "name", "age", "best eval loss", "duration",
)  # fmt: skip


def fitting(columns: tuple[str, ...], cells: list[list[str]], width: int) -> list[str]:
    """The columns a table of these cells can show whole in `width` characters (rich's borders and padding:
    3 a column and 1), dropping DROPPED_FIRST in its order until it fits; the run id and state always stay."""
    natural = dict(zip(columns, narrow.natural_widths([columns, *cells]), strict=True))
    shown = list(columns)
    # A column with nothing in it (cost: always "-" locally) goes before any that says something.
    empty = [c for i, c in enumerate(columns) if cells and all(row[i] in ("-", "") for row in cells)]
    for column in [c for c in empty if c in DROPPED_FIRST] + [c for c in DROPPED_FIRST if c not in empty]:
        if narrow.table_width(natural[c] for c in shown) <= width:
            break
        if column in shown:
            shown.remove(column)
    return shown


def cmd_status(args: argparse.Namespace) -> int:
    backend = targets.backend_for(args)
    record = targets.get_record(backend, args.run)
    if args.json:
        print(json.dumps(status_of(backend, record, args.lines), indent=2, default=str))
        return 0
    out = targets.console()
    out.print(f"[bold]{record.run_id}[/bold]  {record.state.value}  ({backend.where})")
    if record.reason:
        out.print(f"  reason     {record.reason}")
    if record.queue_position:
        out.print(f"  queue      position {record.queue_position}")
    for t in record.history:
        out.print(f"  {t.at:%Y-%m-%d %H:%M:%S}  {t.state.value}" + (f"  {t.reason}" if t.reason else ""))
    if record.region:
        out.print(f"  region     {record.region}" + (f" (via {where(record)})" if record.placements else ""))
    for left in (p for p in record.placements if p.until):
        out.print(f"  moved      from {left.region} at {left.until:%H:%M:%S}: {left.why}", markup=False)
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
        for line in tracking_lines(record.result.tracking):  # its page in each tracker, and what it missed
            out.print(line, markup=False)
        if record.result.sweep:  # the same trials table as the run's story (logs, local, submit --wait)
            for line in trial_lines(record.result.sweep):
                out.print(line, markup=False)
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
    # The end of the run's story as its followers tell it (phases, steps, Ray Train's decisions), not the raw log:
    # `raytune logs RUN --raw` has that.
    told = Story().observe(record, log) if log.strip() else []
    if tail := [line for line in told if not line.startswith(f"run {record.run_id}: ")][-args.lines :]:
        out.print("  last lines of its story:")
        for line in tail:
            out.print(f"  {line}", markup=False)
    return 0


def status_of(backend: Any, record: RunRecord, lines: int) -> dict[str, Any]:
    """`status --json`: the record as stored, and what the cluster says of it now (or why it could not)."""
    found: dict[str, Any] = {"record": json.loads(record.model_dump_json()), "where": backend.where}
    try:
        log = backend.log(record)
        found |= {"job": backend.job(record), "pods": backend.pods(record)}
        found["last_log_lines"] = [joblog.clean(line) for line in log.strip().splitlines()[-lines:]] if log else []
    except Exception as err:  # the record is the answer; the cluster is news
        found["cluster"] = f"unreachable: {err}"
    return found


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
    backend = targets.backend_for(args)
    runs = [targets.get_record(backend, run_id) for run_id in args.runs]
    configs = [_flat(r.config or {}) for r in runs]
    metrics = [_flat(r.result.metrics.model_dump(exclude_none=True) if r.result else {}) for r in runs]
    keys = sorted({k for c in configs for k in c})
    differing = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
    if args.json:
        compared = {
            r.run_id: {
                "state": r.state.value,
                "config": {k: c.get(k) for k in differing},
                "metrics": m,
                "gpu_node_hours": r.gpu_node_seconds / 3600 if r.gpu_node_seconds else None,
                "estimated_cost": _estimated_cost(r),
                "cost": r.cost,
                "tracking": {name: t.url or t.run_id for name, t in (r.result.tracking if r.result else {}).items()},
            }
            for r, c, m in zip(runs, configs, metrics, strict=True)
        }
        print(json.dumps({"differing": differing, "runs": compared}, indent=2))
        return 0
    from rich.table import Table

    config_rows = [[key, *(json.dumps(c[key]) if key in c else "-" for c in configs)] for key in differing]
    rows = [*config_rows, *_outcome_rows(runs, metrics)]
    out = targets.console()
    headings = [f"{r.run_id}\n{r.state.value}" for r in runs]
    if narrow.table_width(narrow.natural_widths([["", *headings], *rows])) > out.width:
        # Run ids are what every other command takes: named whole above the table, never cut inside it.
        short = narrow.letters(len(runs))
        for letter, r in zip(short, runs, strict=True):
            out.print(f"{letter}  {r.run_id}  {r.state.value}", markup=False)
        headings = [f"{letter}\n{r.state.value}" for letter, r in zip(short, runs, strict=True)]
    table = Table(title="config differences and metrics", title_justify="left")
    table.add_column("")
    for heading in headings:
        table.add_column(heading, overflow="fold")
    for row in config_rows:
        table.add_row(*row)
    if differing:
        table.add_section()
    for row in rows[len(config_rows) :]:
        table.add_row(*row)
    out.print(table)
    if not differing:
        out.print("the configs are the same")
    for r in runs:  # each run's page in its trackers, whole (a link is never folded into a cell)
        for name, tracked in (r.result.tracking if r.result else {}).items():
            out.print(f"{r.run_id}  {name}  {tracked.url or tracked.run_id}", markup=False)
    return 0


def _outcome_rows(runs: list[RunRecord], metrics: list[dict[str, Any]]) -> list[list[str]]:
    """compare's rows below the config's: the metrics, a sweep's best trial, GPU time and money."""
    rows = [
        [key, *(f"{m[key]:.4g}" if isinstance(m.get(key), float) else str(m.get(key, "-")) for m in metrics)]
        for key in sorted({k for m in metrics for k in m})
    ]
    if any(r.result and r.result.sweep for r in runs):  # a sweep's metrics above are its best trial's
        rows.append(["sweep: best trial", *(_best_trial(r) for r in runs)])
    rows.append(["GPU node-h", *(f"{r.gpu_node_seconds / 3600:.2f}" if r.gpu_node_seconds else "-" for r in runs)])
    rows.append(["estimated cost", *(_money(_estimated_cost(r)) for r in runs)])
    rows.append(["cost", *(_money(r.cost) for r in runs)])
    return rows


def _best_trial(record: RunRecord) -> str:
    sweep = record.result.sweep if record.result else None
    best = next((t for t in sweep.trials if t.trial_id == sweep.best_trial), None) if sweep else None
    if sweep is None or best is None:
        return "-"
    return f"{best.trial_id} of {len(sweep.trials)}: {shown_values(best.params)}"


def add_parsers(sub: Any) -> None:
    common = options.add_target
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
    options.add_json(status, "the record and what the cluster says of it, as JSON")
    status.set_defaults(func=cmd_status)

    compare = common(sub.add_parser("compare", help="configs' differences and metrics side by side"))
    compare.add_argument("runs", nargs="+", metavar="RUN", help="two or more run ids")
    options.add_json(compare, "the differing fields and metrics of each run, as JSON")
    compare.set_defaults(func=cmd_compare)
