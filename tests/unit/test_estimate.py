"""The estimate before launch (issue 40): nodes and capacity, training time from the dataset's size and the
documented throughput, start-up, and the cost per capacity option at the deployment's prices, as ranges."""

from __future__ import annotations

import pytest

from functions.core.config import RunConfig
from functions.core.estimate import (
    CPU_TINY_SAMPLES_S,
    MFU,
    PEAK_TFLOPS,
    SAMPLE_TFLOP,
    estimate,
    over_budget,
    price_list,
)

pytestmark = pytest.mark.unit


def config(**sections) -> RunConfig:
    return RunConfig.model_validate({"storage_path": "gs://bucket-a/c", **sections})


def test_a_gpu_run_is_estimated_from_the_documented_throughput_and_priced_per_capacity_option():
    cfg = config(
        scaling={"nodes": 2, "capacity": [{"kind": "spot"}, {"kind": "on-demand"}]},
        dataset={"max_samples": 1000, "eval_fraction": 0.1},
        training={"epochs": 2},
    )
    found = estimate(cfg, price_list({"spot": 30.0}, 100.0))
    assert found.samples == 1800 and found.capacity == ["spot", "on-demand"]
    fast = 1800 / (16 * PEAK_TFLOPS["B200"] * MFU[1] / SAMPLE_TFLOP)
    assert found.train_s == pytest.approx((fast, fast * MFU[1] / MFU[0]))
    low, high = found.node_hours
    assert found.costs == {
        "spot": pytest.approx((low * 30, high * 30)),
        "on-demand": pytest.approx((low * 100, high * 100)),
    }
    assert found.upper_cost == pytest.approx(high * 100)
    assert any(line.startswith("  cost      spot: ") for line in found.lines())


def test_what_cannot_be_known_is_said_not_guessed():
    cfg = config(dataset={"id": "gs://bucket-a/products"})  # its size is not known without reading it
    found = estimate(cfg, {"reservation": 80.0})
    assert found.samples is None and found.costs == {} and found.upper_cost is None
    assert "training  unknown: the dataset's size is not known here" in "\n".join(found.lines())
    counted = estimate(cfg, {"on-demand": 80.0}, rows=500)  # validate counted a local dataset's rows
    assert counted.samples == 1500 and counted.upper_cost is not None
    said = "\n".join(estimate(cfg, {}, rows=500).lines(deployment="raytune.toml"))
    assert "cost      unknown: no node-hour prices in raytune.toml" in said


def test_a_cpu_run_costs_nothing_and_its_time_is_the_measured_rate():
    cfg = config(
        model={"id": "tiny://gemma3", "dtype": "float32", "quantization": "none"},
        dataset={"id": "tiny://products", "max_samples": 32, "eval_fraction": 0.25},
        scaling={"nodes": 2, "gpus_per_node": 0},
        training={"epochs": 2},
    )
    found = estimate(cfg, {"on-demand": 80.0})
    assert found.samples == 48 and found.costs == {} and found.node_hours is None
    assert found.train_s == pytest.approx((48 / (2 * CPU_TINY_SAMPLES_S[1]), 48 / (2 * CPU_TINY_SAMPLES_S[0])))


def test_a_sweep_is_all_its_trials_run_to_their_end_at_the_draws_that_train_most():
    sweep = {"space": {"training.epochs": {"kind": "choice", "values": [1, 3]}}, "trials": 6, "concurrent": 2}
    cfg = config(scaling={"nodes": 1}, dataset={"max_samples": 1000, "eval_fraction": 0.1}, sweep=sweep)
    found = estimate(cfg, {"on-demand": 100.0})
    longest = estimate(
        config(scaling={"nodes": 1}, dataset={"max_samples": 1000, "eval_fraction": 0.1}, training={"epochs": 3}),
        {"on-demand": 100.0},
    )
    shortest = estimate(
        config(scaling={"nodes": 1}, dataset={"max_samples": 1000, "eval_fraction": 0.1}, training={"epochs": 1}),
        {"on-demand": 100.0},
    )
    assert found.nodes == 2 and (found.trials, found.concurrent) == (6, 2)  # a node a trial, 2 at once
    assert found.node_hours == pytest.approx((shortest.node_hours[0] * 6, longest.node_hours[1] * 6))
    assert found.upper_cost == pytest.approx(longest.upper_cost * 6)
    assert found.train_s == pytest.approx((shortest.train_s[0] * 3, longest.train_s[1] * 3))  # 3 waves of 2
    assert "sweep     6 trials, 2 at once" in "\n".join(found.lines())
    assert over_budget(cfg, found) is None  # no cap
    capped = cfg.model_copy(update={"sweep": cfg.sweep.model_copy(update={"max_cost": found.upper_cost - 1})})
    assert (
        over_budget(capped, found)
        == f"sweep.max_cost: its upper estimate is {found.upper_cost:.2f}, above {found.upper_cost - 1:g}"
    )


def test_max_steps_decide_what_is_trained_whatever_the_epochs_or_the_datasets_size():
    """Issue 53: the cap priced epochs while the trainer ran max_steps; max_steps needs no dataset size."""
    steps = config(scaling={"nodes": 2}, dataset={"id": "gs://bucket-a/mine/"}, training={"max_steps": 500})
    found = estimate(steps, price_list({}, 100.0))
    assert found.samples == 500 * 4 * 1 * 16  # steps x per-device batch x accumulation x 16 workers
    assert found.upper_cost is not None
    swept = config(
        scaling={"nodes": 1},
        dataset={"max_samples": 1000, "eval_fraction": 0.1},
        sweep={"space": {"training.max_steps": {"kind": "choice", "values": [10, 4000]}}, "trials": 2, "max_cost": 30},
    )
    costly = estimate(swept, price_list({}, 100.0))
    assert costly.samples == 2 * 4000 * 4 * 8  # each trial at the draw that trains most
    assert "sweep.max_cost" in (over_budget(swept, costly) or "")
