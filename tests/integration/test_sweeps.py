"""A sweep through the controller, on the Kubernetes fake: its worker group holds scaling.nodes for each trial
at once, admission and the node cap count all of them, the nodes go when it ends, its GPU time counts them, and
its cost cap refuses a sweep whose upper estimate is above it."""

from __future__ import annotations

import dataclasses

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
