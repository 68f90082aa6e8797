"""A sweep through the controller, on the Kubernetes fake: its worker group holds scaling.nodes for each trial
at once, admission and the node cap count all of them, the nodes go when it ends, its GPU time counts them, and
its cost cap refuses a sweep whose upper estimate is above it."""

from __future__ import annotations

import dataclasses
import json

from functions.core.runs import State
from tests.integration.test_invariants import launch, runs_to_success, workers

SWEEP = {
    "name": "lr-sweep",
    "scaling": {"nodes": 2},
    "dataset": {"eval_fraction": 0.05},
    "deadlines": {"pending_seconds": 600},
    "sweep": {
        "space": {"training.learning_rate": {"kind": "loguniform", "low": 1e-5, "high": 1e-3}},
        "trials": 6,
        "concurrent": 2,
    },
}


def test_a_sweep_holds_its_trials_nodes_at_once_counts_them_and_releases_them(controller, bucket):
    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, node_hour_price=10.0)
    sweep = launch(h, bucket, "lr-sweep", SWEEP)
    assert sweep.state == State.SUBMITTED, sweep.reason
    assert workers(h)["replicas"] == 4  # 2 nodes a trial x 2 trials at once
    # The cap (cluster.max_worker_nodes 5) counts the sweep's 4: a 2-node run waits behind it.
    other = launch(h, bucket, "other", {"name": "other", "scaling": {"nodes": 2}})
    assert other.state == State.QUEUED and "needs 2 worker nodes, 4 of 5" in (other.reason or ""), other.reason
    assert sweep.estimate is not None and sweep.estimate.nodes == 4 and sweep.estimate.trials == 6
    ended = runs_to_success(h, sweep.run_id, seconds=900)
    assert ended.state == State.SUCCEEDED
    assert ended.gpu_node_seconds == 3600.0 and ended.cost == 10.0  # 4 nodes for a quarter of an hour
    assert h.ctx.store.get(other.run_id).state == State.SUBMITTED  # admitted once the sweep's nodes went
    assert workers(h)["groups"] == {g: 2 for g in workers(h)["groups"]} and workers(h)["replicas"] == 2


def test_a_sweep_above_its_cost_cap_is_rejected_before_anything_is_applied(controller, bucket):
    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, node_hour_price=100.0)
    costly = launch(h, bucket, "costly", {**SWEEP, "sweep": {**SWEEP["sweep"], "max_cost": 1.0}})
    assert costly.state == State.REJECTED
    assert "sweep.max_cost: its upper estimate is" in (costly.reason or "") and "above 1" in (costly.reason or "")
    assert h.kube.get("rayclusters", "gemma3-tuning") is None  # nothing applied
    within = launch(h, bucket, "within", {**SWEEP, "sweep": {**SWEEP["sweep"], "max_cost": 100_000.0}})
    assert within.state == State.SUBMITTED and within.estimate is not None
    assert within.estimate.upper_cost is not None and within.estimate.upper_cost <= 100_000.0
    h.ctx.settings = dataclasses.replace(h.ctx.settings, node_hour_price=None)
    unpriced = launch(h, bucket, "unpriced", {**SWEEP, "sweep": {**SWEEP["sweep"], "max_cost": 50.0}})
    assert unpriced.state == State.REJECTED and "no estimate of its cost" in (unpriced.reason or "")


def big_sweep_result(run_id: str, trials: int) -> dict:
    """A sweep's result.json as the trainer writes it for `trials` trials, each with its evaluations' history."""
    history = [{"step": float(s), "eval_loss": 6.0 - s / 100, "loss": 6.5 - s / 100} for s in range(0, 800, 8)]
    listed = [
        {
            "trial_id": f"trial-{n:03d}",
            "params": {"training.learning_rate": 1e-4 + n * 1e-7},
            "state": "finished",
            "metric": 5.0 + n / 1000,
            "history": history,
        }
        for n in range(trials)
    ]
    sweep = {"metric": "eval_loss", "mode": "min", "best_trial": "trial-000", "trials": listed}
    return {"run_id": run_id, "adapter_path": f"gs://b/c/{run_id}/trials/trial-000/adapter", "sweep": sweep}


def test_a_big_sweeps_result_is_read_and_an_unreadable_one_never_ends_succeeded(controller, bucket):
    """Issue 53: 256 trials make a result.json of over a megabyte: it is read (the limit grows with the sweep's
    trials), not dropped with the run SUCCEEDED and no adapter; a result that cannot be read ends the run FAILED
    saying so."""
    from tests.integration.test_functions import upload

    h = controller
    big = {**SWEEP, "name": "big-sweep", "sweep": {**SWEEP["sweep"], "trials": 256}}
    sweep = launch(h, bucket, "big-sweep", big)
    assert sweep.state == State.SUBMITTED, sweep.reason
    storage = h.ctx.store.get(sweep.run_id).config["storage_path"]
    where, _, prefix = storage.removeprefix("gs://").partition("/")
    written = big_sweep_result(sweep.run_id, 256)
    upload(where, f"{prefix}/{sweep.run_id}/result.json", written)
    assert len(json.dumps(written)) > 1024 * 1024
    ended = runs_to_success(h, sweep.run_id, seconds=600)
    assert ended.state == State.SUCCEEDED, ended.reason
    assert ended.result is not None and ended.result.sweep is not None and len(ended.result.sweep.trials) == 256

    broken = launch(h, bucket, "broken-result", {**SWEEP, "name": "broken-result"})
    upload(where, f"{prefix}/{broken.run_id}/result.json", {"sweep": "not a sweep"})
    ended = runs_to_success(h, broken.run_id, seconds=60)
    assert ended.state == State.FAILED
    assert ended.reason is not None and ended.reason.startswith("the job succeeded but its result is unreadable: gs://")
