"""A sweep's report.html: every trial a row, the metric plotted against each swept field and each trial's loss at every
evaluation, early stops marked; opened as a person opens it, in a real browser where the machine has one."""

from __future__ import annotations

from html.parser import HTMLParser

from functions.core.config import RunConfig
from functions.core.result import SweepResult, TrialResult
from tests.reports import in_browser
from trainer.sweep_report import render

CONFIG = RunConfig.model_validate(
    {
        "name": "lr-sweep",
        "dataset": {"eval_fraction": 0.1},
        "sweep": {
            "space": {
                "training.learning_rate": {"kind": "loguniform", "low": 1e-6, "high": 1e-2},
                "lora.r": {"kind": "choice", "values": [8, 16]},
            },
            "trials": 4,
        },
    }
)


def trial(number: int, lr: float, rank: int, *losses: float, stopped: bool = False) -> TrialResult:
    """A trial evaluated every 4 steps with `losses`; stopped early at its last evaluation, or finished."""
    history = [{"step": 4.0 * (i + 1), "eval_loss": loss, "loss": loss + 0.05} for i, loss in enumerate(losses)]
    return TrialResult(
        trial_id=f"trial-{number:03d}",
        params={"training.learning_rate": lr, "lora.r": rank},
        state="stopped" if stopped else "finished",
        metric=losses[-1],
        history=history,
        stopped_at_step=4 * len(losses) if stopped else None,
        wall_seconds=10.0 * len(losses),
        node_seconds=10.0 * len(losses),
    )


SWEEP = SweepResult(
    metric="eval_loss",
    mode="min",
    stopped_on="eval_loss",
    best_trial="trial-002",
    trials=[
        trial(0, 2e-6, 8, 6.41, stopped=True),
        trial(1, 9e-6, 16, 6.41, 6.405, 6.40),
        trial(2, 1.6e-3, 8, 6.19, 5.9, 5.62),
        trial(3, 2.1e-4, 16, 6.36, 6.24, stopped=True),
    ],
)


class Page(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def count(self, tag: str, **attrs: str) -> int:
        return sum(t == tag and all(a.get(k) == v for k, v in attrs.items()) for t, a in self.tags)


def test_the_page_has_every_trial_and_plots_the_metric_against_each_swept_field(tmp_path):
    text = render("lr-sweep-1", CONFIG, SWEEP, "trials/trial-002/checkpoint_x/report.html")
    page = Page(text)
    assert page.count("tr") == 5 and page.count("tr", **{"class": "best"}) == 1  # a header and a row a trial
    # one plot a swept field, and the curves: a point a trial in each field's plot, a line a trial in the curves
    assert page.count("svg", **{"class": "against"}) == 2 and page.count("svg", **{"class": "curves"}) == 1
    assert page.count("polyline") == 4 and text.count("stroke-dasharray") == 2  # the two stopped trials dashed
    assert page.count("a", href="trials/trial-002/checkpoint_x/report.html") == 1
    assert "stopped early at step 4" in text and "stopped early at step 8" in text
    assert "Best: trial trial-002 (training.learning_rate=0.0016, lora.r=8), eval_loss 5.6200" in text
    assert "<script" not in text and "http" not in text.replace("http://www.w3.org", "")  # nothing fetched

    path = tmp_path / "sweep.html"
    path.write_text(text)
    dom = in_browser(path, tmp_path)
    if dom is not None:  # as a person opens it (CI installs chromium)
        assert dom.count("<circle") >= 8 and dom.count("<polyline") == 4


def test_trials_on_one_spot_are_told_apart_and_every_point_names_its_trial():
    """Issue 53: two trials with the same value and metric drew one point; a diverged trial has no place."""
    import math

    from trainer.sweep_report import metric_against

    same = [TrialResult(trial_id=f"trial-00{n}", params={"lora.r": 8}, state="finished", metric=5.0) for n in range(3)]
    other = TrialResult(trial_id="trial-003", params={"lora.r": 16}, state="finished", metric=4.0)
    diverged = TrialResult(trial_id="trial-004", params={"lora.r": 32}, state="finished", metric=math.nan)
    sweep = SweepResult(metric="eval_loss", mode="min", best_trial="trial-003", trials=[*same, other, diverged])
    svg = metric_against("lora.r", sweep, log_x=False)

    class Points(HTMLParser):
        def __init__(self):
            super().__init__()
            self.centres, self.labels, self.in_label = [], [], False

        def handle_starttag(self, tag, attrs):
            found = dict(attrs)
            if tag == "circle" and found.get("r") == "5":
                self.centres.append((found["cx"], found["cy"]))
            self.in_label = tag == "text" and found.get("font-size") == "9"

        def handle_data(self, data):
            if self.in_label:
                self.labels.append(data)

    points = Points()
    points.feed(svg)
    assert len(points.centres) == 4 and len(set(points.centres)) == 4  # the three at one spot moved apart
    assert sorted(points.labels) == ["0", "1", "2", "3"]  # each names its trial; the diverged one is not drawn
    assert "nan" not in svg
