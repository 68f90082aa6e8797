"""A sweep's report.html, in the run's folder beside its trials (each finished trial keeps its evaluation's own):
every trial as a table row, and plots a person reads at a glance: the sweep's metric against each swept field
(early-stopped trials hollow, the best ringed) and each trial's loss at every evaluation (where ASHA stopped a
trial, its curve ends in a cross). One page that opens anywhere: inline SVG and styles, no script, nothing
fetched."""

from __future__ import annotations

import html
import math
from collections.abc import Callable

from functions.core.config import RunConfig
from functions.core.result import SweepResult, TrialResult
from functions.core.sweep import LogUniform, shown, shown_values
from trainer.report import STYLE

WIDTH, HEIGHT, PAD = 420, 260, 46
COLOURS = {"finished": "#1f5fa8", "stopped": "#c0641b", "failed": "#a32020", "unfinished": "#777"}
EXTRA_STYLE = "svg{margin:.5em 1em .5em 0;border:1px solid #ddd;background:#fff}tr.best td{background:#eef6ee}"


def _scale(values: list[float], log: bool, low_px: float, high_px: float) -> Callable[[float], float]:
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = (hi - lo) or 1.0

    def at(value: float) -> float:
        v = math.log10(value) if log else value
        return low_px + (v - lo) / span * (high_px - low_px)

    return at


def _ticks(values: list[float], log: bool) -> list[float]:
    lo, hi = min(values), max(values)
    if lo == hi:
        return [lo]
    if log:
        return [
            10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) if lo <= 10.0**e <= hi
        ] or [lo, hi]
    return [lo + (hi - lo) * i / 4 for i in range(5)]


def _axes(x_label: str, y_label: str, xs: list[float], ys: list[float], log_x: bool) -> tuple[str, Callable, Callable]:
    # Inset from the axes, so a point at an end of the range is not drawn on them.
    x = _scale(xs, log_x, PAD + 12, WIDTH - 22)
    y = _scale(ys, False, HEIGHT - PAD - 4, 24)
    parts = [
        f"<line x1='{PAD}' y1='{HEIGHT - PAD + 8}' x2='{WIDTH - 8}' y2='{HEIGHT - PAD + 8}' stroke='#555'/>",
        f"<line x1='{PAD}' y1='10' x2='{PAD}' y2='{HEIGHT - PAD + 8}' stroke='#555'/>",
        f"<text x='{(WIDTH + PAD) / 2}' y='{HEIGHT - 6}' text-anchor='middle' font-size='12'>{html.escape(x_label)}</text>",
        f"<text x='12' y='{HEIGHT / 2}' font-size='12' text-anchor='middle' "
        f"transform='rotate(-90 12 {HEIGHT / 2})'>{html.escape(y_label)}</text>",
    ]
    for tick in _ticks(xs, log_x):
        parts.append(
            f"<text x='{x(tick):.1f}' y='{HEIGHT - PAD + 22}' font-size='10' text-anchor='middle'>{tick:.3g}</text>"
        )
    for tick in _ticks(ys, False):
        parts.append(f"<text x='{PAD - 4}' y='{y(tick) + 3:.1f}' font-size='10' text-anchor='end'>{tick:.3g}</text>")
    return "".join(parts), x, y


def _marker(trial: TrialResult, best: bool, cx: float, cy: float) -> str:
    colour = COLOURS.get(trial.state, "#777")
    fill = colour if trial.state == "finished" else "none"
    title = f"<title>{html.escape(trial.trial_id)}: {trial.state}</title>"
    ring = f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='9' fill='none' stroke='#176b2c' stroke-width='2'/>" if best else ""
    return f"{ring}<circle cx='{cx:.1f}' cy='{cy:.1f}' r='5' fill='{fill}' stroke='{colour}' stroke-width='2'>{title}</circle>"


OVERLAP_PX = 10  # points closer than this would hide one another
SPREAD_PX = 9  # how far apart they are moved, around where they belong


def spread(points: list[tuple[float, float, TrialResult]]) -> list[tuple[float, float, TrialResult]]:
    """Points that would sit on one another (trials with the same value and metric, a choice's repeats) moved apart
    in a small ring around their common place, so each can be seen and pointed at; the others stay put."""
    groups: dict[tuple[int, int], list[int]] = {}
    for index, (cx, cy, _) in enumerate(points):
        groups.setdefault((round(cx / OVERLAP_PX), round(cy / OVERLAP_PX)), []).append(index)
    placed = list(points)
    for members in groups.values():
        if len(members) < 2:
            continue
        for k, index in enumerate(members):
            cx, cy, trial = points[index]
            angle = 2 * math.pi * k / len(members)
            placed[index] = (cx + SPREAD_PX * math.cos(angle), cy + SPREAD_PX * math.sin(angle), trial)
    return placed


def _label(trial: TrialResult, cx: float, cy: float) -> str:
    """The trial's number beside its point (trial-007: 7), as the table's rows name it."""
    number = trial.trial_id.removeprefix("trial-").lstrip("0") or "0"
    return f"<text x='{cx + 7:.1f}' y='{cy - 7:.1f}' font-size='9' fill='#444'>{html.escape(number)}</text>"


def metric_against(field: str, sweep: SweepResult, log_x: bool) -> str:
    """The sweep's metric against one numeric swept field, a point a trial."""
    points = [
        (float(t.params[field]), t.metric, t)
        for t in sweep.trials
        if t.metric is not None
        and math.isfinite(t.metric)  # a diverged trial has no place on the axis (the table says so)
        and isinstance(t.params.get(field), (int, float))
        and not isinstance(t.params[field], bool)
    ]
    if not points:
        return ""
    axes, x, y = _axes(field, sweep.metric, [p[0] for p in points], [p[1] for p in points], log_x)
    placed = spread([(x(px), y(py), t) for px, py, t in points])
    marks = "".join(_marker(t, t.trial_id == sweep.best_trial, cx, cy) + _label(t, cx, cy) for cx, cy, t in placed)
    return f"<svg class='against' width='{WIDTH}' height='{HEIGHT}' role='img' aria-label='{html.escape(sweep.metric)} against {html.escape(field)}'>{axes}{marks}</svg>"


def curves(sweep: SweepResult, metric: str) -> str:
    """Each trial's `metric` at each evaluation, against the step."""
    lines = [(t, [(row["step"], row[metric]) for row in t.history if metric in row]) for t in sweep.trials]
    lines = [(t, points) for t, points in lines if points]
    if not lines:
        return ""
    axes, x, y = _axes(
        "step", metric, [p[0] for _, ps in lines for p in ps], [p[1] for _, ps in lines for p in ps], False
    )
    drawn = []
    for trial, points in lines:
        colour = COLOURS.get(trial.state, "#777")
        width = 3 if trial.trial_id == sweep.best_trial else 1.5
        dash = " stroke-dasharray='5 3'" if trial.state == "stopped" else ""
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        drawn.append(
            f"<polyline points='{path}' fill='none' stroke='{colour}' stroke-width='{width}'{dash}>"
            f"<title>{html.escape(trial.trial_id)}</title></polyline>"
        )
        if trial.state == "stopped":
            cx, cy = x(points[-1][0]), y(points[-1][1])
            drawn.append(
                f"<path d='M{cx - 5:.1f},{cy - 5:.1f}L{cx + 5:.1f},{cy + 5:.1f}M{cx - 5:.1f},{cy + 5:.1f}L{cx + 5:.1f},{cy - 5:.1f}' "
                f"stroke='{colour}' stroke-width='2.5'/>"
            )
    return f"<svg class='curves' width='{WIDTH}' height='{HEIGHT}' role='img' aria-label='{metric} at each evaluation'>{axes}{''.join(drawn)}</svg>"


def _table(sweep: SweepResult, fields: list[str]) -> str:
    head = "".join(
        f"<th>{html.escape(f)}</th>" for f in ["trial", "state", sweep.metric, *fields, "time", "node-seconds"]
    )
    rows = []
    for t in sweep.trials:
        state = f"stopped early at step {t.stopped_at_step}" if t.state == "stopped" else t.state
        values = [shown(t.params.get(f)) for f in fields]
        cells = [
            f"<td>{html.escape(t.trial_id)}{' (best)' if t.trial_id == sweep.best_trial else ''}</td>",
            f"<td>{html.escape(state)}</td>",
            f"<td class='num'>{'-' if t.metric is None else f'{t.metric:.4f}'}</td>",
            *(f"<td class='num'>{html.escape(v)}</td>" for v in values),
            f"<td class='num'>{'-' if t.wall_seconds is None else f'{t.wall_seconds:.0f} s'}</td>",
            f"<td class='num'>{'-' if t.node_seconds is None else f'{t.node_seconds:.0f}'}</td>",
        ]
        best = " class='best'" if t.trial_id == sweep.best_trial else ""
        rows.append(f"<tr{best}>{''.join(cells)}</tr>")
    return f"<table id='trials'><tr>{head}</tr>{''.join(rows)}</table>"


def render(run_id: str, cfg: RunConfig, sweep: SweepResult, best_report: str | None = None) -> str:
    """`best_report`: the best trial's own report.html, linked (relative to this page)."""
    assert cfg.sweep is not None
    fields = sorted({f for t in sweep.trials for f in t.params})
    counts = {s: sum(t.state == s for t in sweep.trials) for s in ("finished", "stopped", "failed", "unfinished")}
    scheduler = (
        f"ASHA stopped trials whose {sweep.stopped_on} at an evaluation was among the worst at its rung "
        f"(after {cfg.sweep.grace_evaluations} evaluation(s), keeping 1/{cfg.sweep.reduction_factor})."
        if sweep.stopped_on
        else "No early stopping: every trial ran to its end."
    )
    best = next((t for t in sweep.trials if t.trial_id == sweep.best_trial), None)
    best_said = (
        f"Best: trial {html.escape(best.trial_id)} ({html.escape(shown_values(best.params))}), "
        f"{html.escape(sweep.metric)} {best.metric:.4f}: its adapter is the run's."
        if best is not None and best.metric is not None
        else "No trial finished."
    )
    link = f" <a href='{html.escape(best_report, quote=True)}'>Its evaluation report</a>." if best_report else ""
    plots = "".join(metric_against(f, sweep, isinstance(cfg.sweep.space.get(f), LogUniform)) for f in fields) + curves(
        sweep,
        sweep.stopped_on or ("eval_loss" if any("eval_loss" in r for t in sweep.trials for r in t.history) else "loss"),
    )
    title = f"{html.escape(cfg.name)} · sweep {html.escape(run_id)}"
    legend = (
        "<p><span style='color:#1f5fa8'>&#9679;</span> finished &nbsp; <span style='color:#c0641b'>&#9675;</span> "
        "stopped early (its last evaluation; a cross ends its curve) &nbsp; <span style='color:#176b2c'>&#9711;</span> best</p>"
    )
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{STYLE}{EXTRA_STYLE}</style></head><body><h1>{title}</h1>"
        f"<section id='summary'><h2>Summary</h2><p>{len(sweep.trials)} trials of <code>{html.escape(cfg.model.id)}</code>, "
        f"{cfg.sweep.concurrent} at once: {counts['finished']} finished, {counts['stopped']} stopped early"
        + (f", {counts['failed']} failed" if counts["failed"] else "")
        + (f", {counts['unfinished']} unfinished" if counts["unfinished"] else "")
        + f". Ranked by {html.escape(sweep.metric)} ({sweep.mode}), measured on each finished trial's adapter. "
        f"{scheduler}</p><p id='best'>{best_said}{link}</p></section>"
        f"<section id='plots'><h2>Plots</h2>{legend}{plots}</section>"
        f"<section><h2>Trials</h2>{_table(sweep, fields)}</section></body></html>"
    )
