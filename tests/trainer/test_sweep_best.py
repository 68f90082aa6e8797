"""Which trial a sweep crowns (trainer/sweep.py best_of): only a finished trial with a finite metric ranks, so a
diverged trial (NaN, inf) never wins wherever it is listed, and a sweep with no finite result says so."""

from __future__ import annotations

import math

import pytest

from functions.core.config import RunConfig
from functions.core.result import RunResult, TrialResult
from trainer import sweep

CONFIG = RunConfig.model_validate(
    {
        "name": "lr-sweep",
        "model": {"id": "tiny://gemma3", "dtype": "float32", "quantization": "none"},
        "dataset": {"id": "tiny://products", "eval_fraction": 0.2},
        "scaling": {"nodes": 1, "gpus_per_node": 0},
        "sweep": {"space": {"lora.r": {"kind": "choice", "values": [4, 8, 16]}}, "trials": 3, "concurrent": 1},
        "storage_path": "/tmp/raytune-sweep-best",
    }
)


def trial(n: int, metric: float | None, state: str = "finished") -> TrialResult:
    return TrialResult(trial_id=f"trial-{n:03d}", params={"lora.r": 4 * 2**n}, state=state, metric=metric)


@pytest.fixture(autouse=True)
def finished_trials(monkeypatch):
    monkeypatch.setattr(sweep, "finished", lambda trained, trial_id: RunResult(adapter_path=f"/a/{trial_id}"))


def test_a_diverged_trial_listed_first_never_wins():
    trials = [trial(0, math.nan), trial(1, 5.2), trial(2, math.inf), trial(3, 4.9, "stopped")]
    best = sweep.best_of(trials, CONFIG, "run-1", stops_on="eval_loss")
    assert best.sweep is not None and best.sweep.best_trial == "trial-001"
    assert best.adapter_path == "/a/trial-001"


def test_a_sweep_with_no_finite_result_says_so():
    with pytest.raises(RuntimeError, match=r"no trial of the sweep finished with a finite eval_loss: .*nan"):
        sweep.best_of([trial(0, math.nan), trial(1, None, "failed")], CONFIG, "run-1", stops_on=None)
