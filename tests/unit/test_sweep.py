"""A sweep's section: its space validated against the schema, its defaults, and its trials' configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.core.config import ConfigError, RunConfig
from functions.core.config_file import parse_config
from functions.core.result import SweepResult, TrialResult
from functions.core.sweep import SWEEPABLE, trial_config, trial_lines

pytestmark = pytest.mark.unit
QUICKSTART = json.loads(Path(__file__).parents[2].joinpath("examples/quickstart.json").read_text())


def swept(sweep: dict, **sections: dict) -> dict:
    return {**QUICKSTART, **sections, "sweep": sweep}


def errors_of(raw: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    return " | ".join(caught.value.errors)


LR = {"training.learning_rate": {"kind": "loguniform", "low": 1e-5, "high": 1e-2}}


def test_a_sweep_validates_and_holds_its_trials_nodes():
    cfg = parse_config(swept({"space": LR, "trials": 4, "concurrent": 2}))
    assert cfg.sweep is not None and cfg.sweep.trials == 4
    assert cfg.group_nodes == cfg.scaling.nodes * 2
    # The default metric is the champion rule's where samples are scored, else eval_loss; ASHA stops on a loss.
    assert cfg.sweep.ranked_by(cfg.evaluation) == "eval_loss"
    scored = parse_config(swept({"space": LR}, evaluation={"samples": 4}))
    assert scored.sweep is not None and scored.sweep.ranked_by(scored.evaluation) == "rougeL"
    assert scored.sweep.direction(scored.evaluation) == "max"
    assert scored.sweep.stops_on(scored.evaluation) == "eval_loss"


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        ({"training.learnin_rate": {"kind": "uniform", "low": 0.1, "high": 0.2}}, "not a field a sweep may search"),
        ({"scaling.nodes": {"kind": "choice", "values": [1, 2]}}, "not a field a sweep may search"),
        ({"training.learning_rate": {"kind": "loguniform", "low": 1e-5, "high": 2}}, "less than or equal to 1"),
        ({"training.learning_rate": {"kind": "loguniform", "low": 0, "high": 1e-3}}, "greater than 0"),
        ({"training.learning_rate": {"kind": "uniform", "low": 1e-3, "high": 1e-4}}, "must be below high"),
        ({"lora.r": {"kind": "uniform", "low": 4, "high": 64}}, "valid integer"),
        ({"lora.r": {"kind": "randint", "low": 0, "high": 8}}, "greater than or equal to 1"),
        ({"lora.r": {"kind": "choice", "values": [8, 8]}}, "listed twice"),
        ({"lora.r": {"kind": "choice", "values": [8, 16, 8.0]}}, "listed twice"),  # one number, as in JSON
        ({"training.optim": {"kind": "choice", "values": ["adamw_torch", "sgd"]}}, "'sgd' is refused"),
        ({"lora.dropout": {"kind": "normal", "low": 0, "high": 0.1}}, "does not match any of the expected tags"),
    ],
)
def test_a_bad_space_is_rejected_naming_the_field(space, expected):
    said = errors_of(swept({"space": space}))
    assert expected in said


def test_a_draw_the_cross_field_rules_refuse_is_rejected():
    # save_strategy steps needs save_steps: a swept field is validated with the whole config
    raw = swept({"space": {"training.max_length": {"kind": "choice", "values": [256, 32]}}})
    assert "training.max_length: 32 is refused" in errors_of(raw)


def test_metrics_modes_and_sizes_that_cannot_run():
    assert "rougeL is measured on evaluation.samples" in errors_of(swept({"space": LR, "metric": "rougeL"}))
    assert "eval_loss is better min, not max" in errors_of(swept({"space": LR, "mode": "max"}))
    held_out = {**QUICKSTART["dataset"], "eval_fraction": 0}
    assert "needs a held-out set" in errors_of(swept({"space": LR}, dataset=held_out))
    one_node = {**QUICKSTART["scaling"], "nodes": 1}
    assert "more than sweep.trials" in errors_of(swept({"space": LR, "trials": 2, "concurrent": 3}, scaling=one_node))
    # 2 nodes a trial x 3 at once is above cluster.max_worker_nodes (5)
    assert "sweep.concurrent (3) is more than cluster.max_worker_nodes" in errors_of(
        swept({"space": LR, "trials": 4, "concurrent": 3})
    )


def test_every_sweepable_field_exists_in_the_schema():
    cfg = RunConfig()
    for path in SWEEPABLE:
        section, name = path.split(".")
        assert name in type(getattr(cfg, section)).model_fields, path


@given(st.floats(min_value=1e-6, max_value=1.0), st.integers(min_value=1, max_value=1024))
def test_a_trials_config_is_the_runs_with_its_values_and_no_sweep(lr, rank):
    cfg = parse_config(swept({"space": LR, "trials": 2}))
    trial = trial_config(cfg, {"training.learning_rate": lr, "lora.r": rank})
    assert trial.sweep is None
    assert (trial.training.learning_rate, trial.lora.r) == (lr, rank)
    assert trial.model_dump(exclude={"training", "lora", "sweep"}) == cfg.model_dump(
        exclude={"training", "lora", "sweep"}
    )


def test_the_trial_table_marks_the_best_and_the_stopped():
    result = SweepResult(
        metric="eval_loss",
        mode="min",
        stopped_on="eval_loss",
        best_trial="b",
        trials=[
            TrialResult(trial_id="a", params={"lora.r": 4}, state="stopped", metric=6.4, stopped_at_step=4),
            TrialResult(trial_id="b", params={"lora.r": 16}, state="finished", metric=5.6, wall_seconds=40),
        ],
    )
    lines = trial_lines(result)
    assert "2 trials: 1 stopped early, 1 finished (ASHA on eval_loss); best b by eval_loss (min)" in lines[0]
    assert lines[2].split()[:4] == ["a", "stopped", "at", "4"]
    assert lines[3].split()[:2] == ["b", "*"]


def test_choices_are_told_apart_as_json_schema_does():
    """8 and 8.0 are one value; true is never the number 1 (JSON Schema's uniqueItems)."""
    from functions.core.sweep import json_value

    assert json_value(8) == json_value(8.0) and json_value(True) != json_value(1)
    assert len({json_value(v) for v in [8, 8.0, True, 1]}) == 3
