"""report.html beside the adapter: what the evaluation measured and what the models wrote, one page that
opens anywhere (images embedded as JPEG data URIs, styles inline, no script, nothing fetched)."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io

from functions.core.config import RunConfig
from functions.core.result import Evaluation
from trainer.evaluate import Sample

REPORT_FILE = "report.html"
THUMBNAIL_PX = 160
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.4em .6em;vertical-align:top}
th{background:#f3f3f3;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
.better{color:#176b2c;font-weight:600}.worse{color:#a32020}img{display:block;border-radius:4px}
td.text{max-width:22em;overflow-wrap:anywhere}
code{overflow-wrap:anywhere}
#verdict{font-weight:600}
"""


def thumbnail(image) -> str:
    """A data URI of the image shrunk to fit THUMBNAIL_PX (JPEG)."""
    copy = image.convert("RGB")
    copy.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
    buffer = io.BytesIO()
    copy.save(buffer, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def _num(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _metrics(evaluation: Evaluation, cfg: RunConfig, baseline: str) -> str:
    rows = []
    for metric, lower_wins in (("eval_loss", True), ("rougeL", False), ("bleu", False)):
        new, old = getattr(evaluation.challenger, metric), getattr(evaluation.baseline, metric)
        mark = ""
        if new is not None and old is not None and new != old:
            mark = "better" if (new < old) == lower_wins else "worse"
        chosen = " (decides)" if metric == cfg.evaluation.metric else ""
        rows.append(
            f"<tr><th>{metric}{chosen}</th><td class='num {mark}'>{_num(new)}</td><td class='num'>{_num(old)}</td></tr>"
        )
    return (
        f"<table id='metrics'><tr><th>metric</th><th>challenger (this run)</th><th>{html.escape(baseline)}</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _training(cfg: RunConfig, final: dict, when: dt.datetime) -> str:
    """Steps, time, throughput, date and the hardware asked for; where the nodes came from and what they cost is
    the controller's to know: the run record says it."""
    seconds = final.get("train_runtime") or final.get("loop_seconds")
    tokens = final.get("num_tokens")
    s = cfg.scaling
    capacity = (
        ", then ".join(o.kind for o in s.capacity)
        if s.capacity
        else f"reservation {s.reservation}"
        if s.reservation
        else "the deployment's default"
    )
    rows = [
        ("steps", f"{final.get('global_step', 'n/a')} ({_num(final.get('epoch'), 2)} epochs)"),
        ("training time", "n/a" if seconds is None else f"{seconds:.1f} s"),
        ("tokens/s", "n/a" if not (tokens and seconds) else f"{tokens / seconds:.0f}"),
        ("samples/s", _num(final.get("train_samples_per_second"), 2)),
        ("date", f"{when:%Y-%m-%d %H:%M} UTC"),
        ("nodes", f"{s.nodes} x {f'{s.gpus_per_node} {s.accelerator}' if s.use_gpu else 'CPU'}"),
        ("capacity asked for", capacity),
        ("capacity had, cost", "in the run record (raytune status RUN): the controller sees the nodes"),
    ]
    return (
        "<table id='training'>"
        + "".join(f"<tr><th>{name}</th><td>{html.escape(value)}</td></tr>" for name, value in rows)
        + "</table>"
    )


def _disagreement(evaluation: Evaluation, cfg: RunConfig) -> str:
    """A note when the other metrics point the other way from the deciding one."""
    deciding = evaluation.gain(cfg.evaluation.metric)
    others = {m: evaluation.gain(m) for m in ("eval_loss", "rougeL", "bleu") if m != cfg.evaluation.metric}
    if deciding is None:
        return ""
    against = [m for m, gain in others.items() if gain is not None and gain * deciding < 0]
    if not against:
        return ""
    way = "better" if deciding > 0 else "worse"
    return (
        f"<p id='disagree'>Note: {html.escape(cfg.evaluation.metric)} (which decides) says this run is {way}, "
        f"but {' and '.join(against)} say the opposite: read the samples before trusting the verdict.</p>"
    )


def render(
    run_id: str,
    cfg: RunConfig,
    evaluation: Evaluation,
    samples: list[Sample],
    final: dict | None = None,
    when: dt.datetime | None = None,
) -> str:
    """`final`: the training's own figures (steps, time, tokens), for the page's training summary."""
    baseline = f"champion {evaluation.champion_run_id}" if evaluation.champion_run_id else "base model"
    e = cfg.evaluation
    rule = (
        f"The champion pointer moves to this adapter when its {e.metric} is "
        f"{'lower' if e.metric == 'eval_loss' else 'higher'} than the {html.escape(baseline)}'s by more than "
        f"{e.margin}; the run-finished event and the run record say whether it did."
    )
    gain = evaluation.gain(e.metric)
    verdict = (
        f"{e.metric} was not measured for both models: not promoted."
        if gain is None
        else f"Better than the {html.escape(baseline)} by {gain:.4f} &gt; margin {e.margin}: promoted, unless the "
        "champion changed while this run trained (the run record has the final verdict)."
        if gain > e.margin
        else f"Gain over the {html.escape(baseline)} {gain:.4f}, not above margin {e.margin}: not promoted."
    )
    rows = "".join(
        "<tr>"
        f"<td><img src='{thumbnail(s.image)}' alt='{html.escape(s.product, quote=True)}'></td>"
        f"<td class='text'><b>{html.escape(s.product)}</b><br>{html.escape(s.category)}</td>"
        f"<td class='text'>{html.escape(s.reference)}</td>"
        f"<td class='text'>{html.escape(s.challenger)}<br><small>ROUGE-L {s.challenger_rouge:.3f}</small></td>"
        f"<td class='text'>{html.escape(s.baseline)}<br><small>ROUGE-L {s.baseline_rouge:.3f}</small></td>"
        "</tr>"
        for s in samples
    )
    title = f"{html.escape(cfg.name)} · run {html.escape(run_id)}"
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>{title}</h1>"
        f"<section id='summary'><h2>Summary</h2><p>Model <code>{html.escape(cfg.model.id)}</code>, dataset "
        f"<code>{html.escape(cfg.dataset.id)}</code>; {evaluation.samples} held-out samples (chosen by a stable "
        f"hash of <code>{html.escape(cfg.dataset.key_field or cfg.dataset.product_field)}</code>), greedy "
        f"decoding up to {e.max_new_tokens} tokens. Challenger: this run's adapter; baseline: the "
        f"{html.escape(baseline)}.</p><p>{rule}</p><p id='verdict'>{verdict}</p></section>"
        f"<section><h2>Training</h2>{_training(cfg, final or {}, when or dt.datetime.now(dt.UTC))}</section>"
        f"<section><h2>Metrics</h2>{_metrics(evaluation, cfg, baseline)}{_disagreement(evaluation, cfg)}</section>"
        "<section><h2>Samples</h2><table id='samples'><tr><th>image</th><th>product, category</th>"
        f"<th>reference</th><th>challenger</th><th>{html.escape(baseline)}</th></tr>{rows}</table></section>"
        "</body></html>"
    )
