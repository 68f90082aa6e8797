"""report.html's verdict and layout, without a model: the page says whether the run is promoted by the champion
rule (the same Evaluation.gain the controller judges with), and long tokens wrap inside their cells."""

from __future__ import annotations

import pytest
from PIL import Image

from functions.core.config import RunConfig
from functions.core.result import Evaluation, Scores
from tests.reports import ReportPage
from trainer import report
from trainer.evaluate import Sample

CONFIG = RunConfig.model_validate(
    {
        "name": "shop",
        "dataset": {"eval_fraction": 0.2},
        "evaluation": {"samples": 1, "metric": "rougeL", "margin": 0.01},
    }
)
LONG = "https://example.com/" + "x" * 300  # one token wider than any cell


@pytest.mark.parametrize(
    ("challenger", "verdict"),
    [
        (0.50, "Better than the base model by 0.1000 > margin 0.01: promoted"),
        (0.405, "Gain over the base model 0.0050, not above margin 0.01: not promoted."),
        (None, "rougeL was not measured for both models: not promoted."),
    ],
)
def test_the_page_says_whether_the_run_is_promoted(challenger, verdict):
    evaluation = Evaluation(
        samples=1, challenger=Scores(rougeL=challenger), baseline=Scores(rougeL=0.40), baseline_kind="base"
    )
    sample = Sample(image=Image.new("RGB", (32, 32)), product="p", category="c", reference=LONG, challenger=LONG)
    text = report.render("run-1", CONFIG, evaluation, [sample])
    page = ReportPage(text)
    assert "verdict" in page.ids and verdict in " ".join(page.text)
    assert "overflow-wrap:anywhere" in text.split("td.text{", 1)[1].split("}", 1)[0]


def test_the_page_summarises_the_training_and_notes_metrics_that_disagree_with_the_deciding_one():
    """Issue 40: the page said nothing of the training (steps, time, tokens/s, date, capacity, cost), nor that
    ROUGE-L and BLEU pointed the other way from the deciding eval_loss."""
    import datetime as dt

    cfg = CONFIG.model_copy(
        update={"evaluation": CONFIG.evaluation.model_copy(update={"metric": "eval_loss", "margin": 0.0})}
    )
    evaluation = Evaluation(
        samples=1,
        challenger=Scores(eval_loss=1.0, rougeL=0.30, bleu=12.0),
        baseline=Scores(eval_loss=1.5, rougeL=0.40, bleu=10.0),
        baseline_kind="base",
    )
    sample = Sample(image=Image.new("RGB", (32, 32)), product="p", category="c", reference="r", challenger="c")
    final = {"global_step": 14, "epoch": 2.0, "train_runtime": 2.5, "num_tokens": 12500.0}
    when = dt.datetime(2026, 12, 5, 9, 30, tzinfo=dt.UTC)
    page = ReportPage(report.render("run-1", cfg, evaluation, [sample], final, when))
    text = " ".join(page.text)
    assert {"training", "disagree"} <= set(page.ids)
    for said in ("14 (2.00 epochs)", "2.5 s", "5000", "2026-12-05 09:30 UTC", "2 x 8 B200", "in the run record"):
        assert said in text, said
    assert "eval_loss (which decides) says this run is better, but rougeL say the opposite" in text
    agreeing = evaluation.model_copy(update={"challenger": Scores(eval_loss=1.0, rougeL=0.5, bleu=12.0)})
    assert "disagree" not in ReportPage(report.render("run-1", cfg, agreeing, [sample], final, when)).ids
