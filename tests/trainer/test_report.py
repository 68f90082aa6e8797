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
