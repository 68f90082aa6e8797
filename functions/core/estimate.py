"""What a run will take before it is launched: its nodes and where they may come from, the training time from
the dataset's size and the trainer's throughput, the start-up, and the cost per capacity option at the
deployment's prices, each as a range with its source. `validate` and `submit` print it, `submit --max-cost`
refuses a run whose upper estimate is above the limit, and the run's record keeps it beside the actual cost.

Throughput: on GPUs no figure has been measured yet (bench/gpu.sh waits for a lent GPU), so the documented
estimate is used: 5-10% MFU of the accelerator's dense bf16 peak at the default recipe's 18.5 TFLOP a sample
(26.8 with gradient checkpointing and a trained LM head, the recipe's; docs/performance.md, "FLOPs of a training
sample"). On CPU the quickstart's
measured rate for the tiny model (bench/local_e2e.py) is used, and nothing else is estimated."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from functions.core.advice import KNOWN_ROWS
from functions.core.capacity import KINDS
from functions.core.config import RunConfig, TrainingSpec
from functions.core.sweep import candidates, trial_config

# Dense bf16 peak per GPU, TFLOP/s (vendor datasheets: B200 2.25 PF, H100/H200 989 TF, A100 312 TF, L4 121 TF).
PEAK_TFLOPS = {"B200": 2250.0, "H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0}
MFU = (0.05, 0.10)  # the documented range for batches of 4 x ~400 tokens and 16,384 patches (docs/performance.md)
SAMPLE_TFLOP = 18.5  # google/gemma-3-4b-it at 896 px, ~392 tokens (~135 scored), LoRA (docs/performance.md)
CHECKPOINTING = 26.6 / 18.5  # recomputing the forward (bench/trainer_throughput.py flops_per_sample)
# Text parameters relative to the 4B model's (the vision tower is the same SigLIP in each): the FLOPs scale so.
MODEL_SCALE = {"google/gemma-3-4b-it": 1.0, "google/gemma-3-12b-it": 3.0, "google/gemma-3-27b-it": 6.8}
CPU_TINY_SAMPLES_S = (8.0, 12.0)  # per worker, the quickstart's training (bench/local_e2e.py, 2 cores)
GPU_STARTUP_S = (300.0, 1200.0)  # nodes made and joined, the trainer image pulled, 8.6 GB of weights copied
CPU_STARTUP_S = (10.0, 30.0)  # the local Ray head, nodes and workers (bench/local_e2e.py)
SOURCE = "docs/performance.md"

Span = tuple[float, float]


class Estimate(BaseModel):
    nodes: int
    hardware: str  # "8 x B200" or "CPU"
    capacity: list[str]  # the kinds its nodes may come from, in order
    samples: int | None = None  # training samples over all epochs (None: the dataset's size is unknown here)
    train_s: Span | None = None
    startup_s: Span
    node_hours: Span | None = None
    costs: dict[str, Span] = {}  # capacity kind -> cost range at the deployment's prices
    basis: str  # how the throughput was had
    trials: int | None = None  # a sweep's: every figure above is for all of them, each run to its end
    concurrent: int | None = None
    # A run that may move: its regions in order, and its wait in each before it moves on (None: the deployment's);
    # left out for one region, as records are written: a release before regions reads them.
    regions: list[str] = Field([], exclude_if=lambda regions: not regions)
    region_wait_s: int | None = Field(None, exclude_if=lambda seconds: seconds is None)

    @property
    def upper_cost(self) -> float | None:
        return max((high for _, high in self.costs.values()), default=None)

    def lines(self, currency: str | None = None, deployment: str | None = None) -> list[str]:
        """For people: `currency` the prices' (none: the deployment's unit); `deployment` where the prices and the
        capacity came from (none: there is no deployment, and the capacity is the config's own)."""
        said = [f"estimate: {self.nodes} x {self.hardware} from {' or '.join(self.capacity)}"]
        if self.trials:
            said.append(
                f"  sweep     {self.trials} trials, {self.concurrent} at once, each run to its end "
                "(ASHA's early stops only lower it)"
            )
        if self.samples is None or self.train_s is None:
            said.append("  training  unknown: the dataset's size is not known here (set dataset.max_samples)")
        else:
            said.append(f"  training  {self.samples} samples in {_span_time(self.train_s)} ({self.basis})")
        said.append(f"  start-up  {_span_time(self.startup_s)}")
        if self.regions:
            wait = _time(self.region_wait_s) if self.region_wait_s else "the deployment's wait (policy_region_seconds)"
            said.append(
                f"  regions   {', then '.join(self.regions)}: where its nodes do not come, it moves on after {wait}, "
                "which adds to its start; each region reads the same runs bucket, nothing is copied "
                "(docs/regions.md: what the data's location costs)"
            )
        if self.node_hours is not None:
            said.append(f"  nodes     {_span(*self.node_hours, '.2f')} node-hours")
        unit = f" {currency}" if currency else ""
        for kind, (low, high) in self.costs.items():
            said.append(f"  cost      {kind}: {_span(low, high, '.2f')}{unit} (at the deployment's node-hour price)")
        if self.node_hours is not None and not self.costs and self.hardware != "CPU":
            if deployment is None:
                said.append(
                    "  cost      unknown: no deployment settings (raytune.toml: terraform output -raw cli_config), "
                    "so no prices, and the capacity is the config's own, not what the deployment's policy fixes"
                )
            else:
                said.append(f"  cost      unknown: no node-hour prices in {deployment} (Terraform node_hour_price(s))")
        return said


def price_list(by_kind: Mapping[str, float], default: float | None) -> dict[str, float]:
    """A node-hour's price for each capacity kind, as the deployment charges runs (`default` for a kind not listed)."""
    return {k: p for k in KINDS if (p := by_kind.get(k, default)) is not None}


def rows_of(cfg: RunConfig, counted: int | None = None) -> int | None:
    """The dataset's rows as the run will read them, where known without reading it (or `counted`)."""
    rows = counted if counted is not None else KNOWN_ROWS.get(cfg.dataset.id)
    if cfg.dataset.max_samples:
        rows = min(rows, cfg.dataset.max_samples) if rows is not None else cfg.dataset.max_samples
    return rows


def trained_samples(train_rows: int | None, training: TrainingSpec, workers: int) -> int | None:
    """The samples a run trains, by the rule Hugging Face's Trainer sets its steps with (set_initial_training_values,
    held to it by tests/unit/test_estimate.py): training.max_steps optimizer steps of the global batch (per-device
    batch x gradient accumulation x workers), whatever the epochs, where it is set; else every held-in row, epochs
    times. None: the dataset's size is not known here (max_steps alone needs none)."""
    if training.max_steps:
        return training.max_steps * training.per_device_batch_size * training.gradient_accumulation_steps * workers
    return None if train_rows is None else round(train_rows * training.epochs)


def estimate(cfg: RunConfig, prices: Mapping[str, float], rows: int | None = None) -> Estimate:
    """`prices`: node-hour price by capacity kind (a kind not there has no cost figure); `rows`: the dataset's
    rows where they were counted (validate reads a local dataset), else what the config says. A sweep's is its
    trials' together: each trial estimated at the draws that train least and most, all of them run to the end."""
    if cfg.sweep is None:
        return _one_run(cfg, prices, rows)
    sweep = cfg.sweep
    low, high = (_one_run(trial_config(cfg, draws), prices, rows) for draws in _extremes(cfg))
    waves = math.ceil(sweep.trials / sweep.concurrent)

    def spans(a: Span | None, b: Span | None, times: int) -> Span | None:
        return None if a is None or b is None else (a[0] * times, b[1] * times)

    return high.model_copy(
        update={
            "nodes": cfg.group_nodes,
            "train_s": spans(low.train_s, high.train_s, waves),
            "startup_s": (high.startup_s[0], high.startup_s[1] * waves),
            "node_hours": spans(low.node_hours, high.node_hours, sweep.trials),
            "costs": {
                kind: (low.costs[kind][0] * sweep.trials, span[1] * sweep.trials) for kind, span in high.costs.items()
            },
            "samples": None if high.samples is None else high.samples * sweep.trials,
            "trials": sweep.trials,
            "concurrent": sweep.concurrent,
        }
    )


def beyond(expected: Estimate, cap: float | None) -> str | None:
    """The budget rule: why an estimate is refused by a cost cap, its upper end above it or no estimate at all
    (None: within it, or no cap). A sweep's own sweep.max_cost and `submit --max-cost` are both this rule."""
    if cap is None:
        return None
    upper = expected.upper_cost
    if upper is not None and upper <= cap:
        return None
    why = (
        "no estimate of its cost (no node-hour price for its capacity)"
        if upper is None
        else f"its upper estimate is {upper:.2f}"
    )
    return f"{why}, above {cap:g}"


def over_budget(cfg: RunConfig, expected: Estimate) -> str | None:
    """Why a sweep is refused by its own sweep.max_cost (None: it has none, or is within it)."""
    why = beyond(expected, cfg.sweep.max_cost) if cfg.sweep else None
    return f"sweep.max_cost: {why}" if why else None


def _extremes(cfg: RunConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The draws of the swept fields whose trial trains least, and most, by the estimate (each bound or choice
    estimated once)."""
    assert cfg.sweep is not None
    least: dict[str, Any] = {}
    most: dict[str, Any] = {}
    for path, dimension in cfg.sweep.space.items():
        spans = [(_one_run(trial_config(cfg, {path: value}), {}).train_s, value) for value in candidates(dimension)]
        timed = [(span[1] if span else 0.0, value) for span, value in spans]
        least[path] = min(timed, key=lambda pair: pair[0])[1]
        most[path] = max(timed, key=lambda pair: pair[0])[1]
    return least, most


def _one_run(cfg: RunConfig, prices: Mapping[str, float], rows: int | None = None) -> Estimate:
    s, t = cfg.scaling, cfg.training
    kinds = [o.kind for o in s.capacity] if s.capacity else ["reservation" if s.reservation else "on-demand"]
    rows = rows_of(cfg, rows)
    # held out by a hash of each sample's key (trainer/data.py): about eval_fraction of them
    held_in = None if rows is None else round(rows * (1 - cfg.dataset.eval_fraction))
    samples = trained_samples(held_in, t, s.num_workers)
    if s.use_gpu:
        flop = SAMPLE_TFLOP * MODEL_SCALE.get(cfg.model.id, 1.0) * (CHECKPOINTING if t.gradient_checkpointing else 1)
        rate = [s.num_workers * PEAK_TFLOPS[s.accelerator] * mfu / flop for mfu in MFU]
        basis = f"{MFU[0]:.0%}-{MFU[1]:.0%} MFU of {PEAK_TFLOPS[s.accelerator]:g} TFLOP/s, {flop:.1f} TFLOP a sample"
        startup = GPU_STARTUP_S
    else:
        rate = [s.num_workers * r for r in CPU_TINY_SAMPLES_S]
        basis = "the quickstart's measured CPU rate for the tiny model"
        startup = CPU_STARTUP_S
    train = None if samples is None else (samples / rate[1], samples / rate[0])
    hours = (
        None if train is None else ((train[0] + startup[0]) * s.nodes / 3600, (train[1] + startup[1]) * s.nodes / 3600)
    )
    costs = (
        {kind: (hours[0] * prices[kind], hours[1] * prices[kind]) for kind in kinds if kind in prices}
        if hours is not None and s.use_gpu
        else {}
    )
    return Estimate(
        nodes=s.nodes,
        hardware=f"{s.gpus_per_node} x {s.accelerator}" if s.use_gpu else "CPU",
        capacity=kinds,
        samples=samples,
        train_s=train,
        startup_s=startup,
        node_hours=hours if s.use_gpu else None,
        costs=costs,
        basis=f"{basis}; {SOURCE}",
        regions=list(cfg.cluster.regions) if cfg.cluster.fallback_regions else [],
        region_wait_s=cfg.deadlines.region_seconds,
    )


def _span_time(span: Span) -> str:
    low, high = _time(span[0]), _time(span[1])
    return low if low == high else f"{low}-{high}"


def _span(low: float, high: float, form: str) -> str:
    """A range for people: one figure where both ends read the same."""
    shown = format(low, form), format(high, form)
    return shown[0] if shown[0] == shown[1] else f"{shown[0]}-{shown[1]}"


def _time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
