"""The pure parts of nightly fine-tunes: the inputs' fingerprint, and champion against challenger."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from functions.core import champion, fingerprint
from functions.core.config import EvaluationSpec
from functions.core.fingerprint import LastTrained
from functions.core.result import Evaluation, RunResult, Scores, SweepResult, TrialResult

NOW = dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.UTC)
CONFIG = {"name": "nightly", "dataset": {"id": "gs://b/products"}}
SHARDS = [("gs://b/products/part-0.parquet", "17"), ("gs://b/products/part-1.parquet", "18")]


def last(print_: str) -> LastTrained:
    return LastTrained(name="nightly", run_id="nightly-20261202", fingerprint=print_, created_at=NOW)


def test_the_same_inputs_in_any_listing_order_are_unchanged():
    first = fingerprint.inputs(CONFIG, "code", SHARDS)
    again = fingerprint.inputs(CONFIG, "code", list(reversed(SHARDS)), last=last(first.fingerprint or ""))
    assert again.fingerprint == first.fingerprint and again.unchanged_since == "nightly-20261202"
    assert again.dataset_objects == 2


@pytest.mark.parametrize(
    ("config", "code", "shards"),
    [
        ({**CONFIG, "training": {"epochs": 1}}, "code", SHARDS),  # another config
        (CONFIG, "code-2", SHARDS),  # another trainer
        (CONFIG, "code", [*SHARDS, ("gs://b/products/part-2.parquet", "19")]),  # a new shard
        (CONFIG, "code", [SHARDS[0], (SHARDS[1][0], "25")]),  # a shard rewritten
    ],
)
def test_any_change_trains(config, code, shards):
    before = fingerprint.inputs(CONFIG, "code", SHARDS)
    after = fingerprint.inputs(config, code, shards, last=last(before.fingerprint or ""))
    assert after.fingerprint != before.fingerprint and after.unchanged_since is None


def test_an_unversioned_dataset_always_trains():
    inputs = fingerprint.inputs(CONFIG, "code", None, "not visible", last=last("x"))
    assert inputs.fingerprint is None and inputs.unchanged_since is None and inputs.unversioned == "not visible"


def result(challenger: float, baseline: float, against: str | None = None, loss: tuple = (1.0, 1.2)) -> RunResult:
    return RunResult(
        adapter_path="gs://b/ckpt/run-2/checkpoint_000002/adapter",
        evaluation=Evaluation(
            samples=4,
            challenger=Scores(rougeL=challenger, bleu=challenger * 100, eval_loss=loss[0]),
            baseline=Scores(rougeL=baseline, bleu=baseline * 100, eval_loss=loss[1]),
            baseline_kind="champion" if against else "base",
            champion_run_id=against,
        ),
    )


def swept(state: str, metric: float, best: str = "trial-1") -> RunResult:
    """A sweep's result naming `best` its best trial, trial-1 having ended `state` with `metric`."""
    trials = [
        TrialResult(trial_id="trial-0", params={"lora.r": 8}, state="finished", metric=0.1),
        TrialResult(trial_id="trial-1", params={"lora.r": 16}, state=state, metric=metric),
    ]
    sweep = SweepResult(metric="rougeL", mode="max", best_trial=best, trials=trials)
    return result(0.3, 0.1).model_copy(update={"sweep": sweep})


def holder(run_id: str = "run-1") -> champion.Champion:
    return champion.Champion(
        name="nightly",
        run_id=run_id,
        adapter_path="gs://b/a",
        scores=Scores(rougeL=0.4),
        metric="rougeL",
        promoted_at=NOW,
    )


SPEC = EvaluationSpec(samples=4, margin=0.01)


@pytest.mark.parametrize(
    ("case", "run_result", "spec", "current", "promoted", "reason"),
    [
        ("first champion: beats the base model", result(0.3, 0.1), SPEC, None, True, "of the base model: better"),
        ("beats the champion by the margin", result(0.45, 0.4, "run-1"), SPEC, holder(), True, "better by 0.0500"),
        ("within the margin", result(0.405, 0.4, "run-1"), SPEC, holder(), False, "not above margin 0.01"),
        ("worse", result(0.3, 0.4, "run-1"), SPEC, holder(), False, "gain -0.1000"),
        (
            "the champion changed meanwhile",
            result(0.9, 0.4, "run-1"),
            SPEC,
            holder("run-3"),
            False,
            "the champion changed during the run (now run-3; evaluated against run-1)",
        ),
        (
            "eval loss: lower wins",
            result(0.1, 0.4, "run-1", loss=(0.8, 1.0)),
            EvaluationSpec(samples=4, metric="eval_loss"),
            holder(),
            True,
            "eval_loss 0.8000 vs 1.0000",
        ),
        ("not evaluated", RunResult(adapter_path="a"), EvaluationSpec(), holder(), False, "not evaluated"),
        ("no result at all", None, SPEC, None, False, "the trainer wrote no evaluation"),
        ("promoted before (a redelivery)", result(0.45, 0.4, "run-1"), SPEC, holder("run-2"), True, "already"),
        ("a diverged challenger", result(math.nan, 0.4, "run-1"), SPEC, holder(), False, "rougeL is not a number"),
        ("a sweep's best trial stopped early", swept("stopped", 0.2), SPEC, None, False, "was stopped early"),
        ("a sweep's best trial failed", swept("failed", 0.2), SPEC, None, False, "is failed, not finished"),
        ("a sweep's best trial diverged", swept("finished", math.nan), SPEC, None, False, "rougeL nan, not a number"),
        ("a sweep's best trial unlisted", swept("finished", 0.2, "trial-9"), SPEC, None, False, "no such trial"),
        ("a sweep's finished best trial", swept("finished", 0.2), SPEC, None, True, "better"),
    ],
)
def test_judge(case, run_result, spec, current, promoted, reason):
    verdict = champion.judge("run-2", run_result, spec, current)
    assert verdict.promoted is promoted, (case, verdict)
    assert reason in verdict.reason, (case, verdict.reason)
    assert verdict.champion_run_id == ("run-2" if promoted else (current.run_id if current else None)), case


def test_a_nightly_still_training_the_same_inputs_makes_the_next_night_unchanged():
    first = fingerprint.inputs(CONFIG, "code", SHARDS)
    again = fingerprint.inputs(CONFIG, "code", SHARDS, live=[("nightly-20261202", first.fingerprint)])
    assert again.unchanged_since == "nightly-20261202" and again.in_flight
    other = fingerprint.inputs(
        CONFIG,
        "code",
        [*SHARDS, ("gs://b/products/part-2.parquet", "3")],
        live=[("nightly-20261202", first.fingerprint)],
    )
    assert other.unchanged_since is None and not other.in_flight
