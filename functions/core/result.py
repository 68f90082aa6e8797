"""The trainer's result contract: `<storage_path>/<run_id>/result.json`, written by the trainer,
read by the watcher into the run record and the run-finished event. Shared with the trainer, so it
imports nothing but pydantic."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# The run folder, <storage_path>/<run_id>/ (a sweep's trial: <run folder>/trials/<trial id>/): Ray Train's
# checkpoints, and from the best one the final adapter, its base model when tiny, its TensorBoard logs; result.json
# beside them, the summary the watcher copies into the run record.
RESULT_FILE = "result.json"
ADAPTER_DIR = "adapter"
BASE_DIR = "base-model"  # the tiny model's weights, kept with its adapter
TENSORBOARD_DIR = "tensorboard"
GPU_DRIVER_FILE = "gpu-driver.json"  # a GPU run's reading of one of its nodes' NVIDIA driver, before any worker
NODE_NAME_ENV = "RAYTUNE_NODE_NAME"  # in every Ray container: the node it runs on (spec.nodeName)


def run_folder(storage_path: str, run_id: str) -> str:
    """Where a run (or a sweep's trial) keeps its checkpoints, adapter and result."""
    return f"{storage_path.rstrip('/')}/{run_id}"


# The champion at submission, given to the trainer (JSON {"run_id", "adapter_path"}): the baseline it
# evaluates against and, with training.init_adapter "champion", its warm start.
CHAMPION_ENV = "RAYTUNE_CHAMPION"
INPUTS_ENV = "RAYTUNE_INPUTS_FINGERPRINT"  # a nightly's fingerprint of its inputs, a tag of its tracked run
ATTEMPT_ENV = "RAYTUNE_ATTEMPT"  # the run's attempt, for the trainer to say whether it had a checkpoint to resume
WORKER_RESOURCE_ENV = "RAYTUNE_WORKER_RESOURCE"  # the run's own Ray resource (its worker group's): workers ask for 1
# The Ray head's resource for a sweep's trial drivers (Ray Tune's trial processes, each driving one Ray Train
# run): one each, so they run beside the job's driver, never on a worker group's CPUs.
TRIAL_DRIVER_RESOURCE = "raytune-trial-driver"
TRIAL_DRIVERS = 64  # sweep.concurrent's limit


class Lenient(BaseModel):
    # A newer trainer may add fields: the controller keeps them rather than refusing the result.
    model_config = ConfigDict(extra="allow")


class GpuDriverSeen(Lenient):
    """What the preflight read on one of a GPU run's nodes (trainer/preflight.py): the node, its NVIDIA driver
    and the CUDA the image's torch build needs; `doctor` reports it for the nodes that exist."""

    node: str
    driver: str | None = None  # "580.82.07"; None: the node showed no driver
    cuda: str | None = None  # "13.0"; None: the image's packages do not say
    problem: str | None = None  # why the driver cannot run that CUDA (the run then failed at once)


class RunMetrics(Lenient):
    train_loss: float | None = None
    best_checkpoint_by: str | None = None  # eval_loss where every checkpoint was evaluated, else loss
    best_checkpoint_score: float | None = None
    num_tokens: float | None = None
    mean_token_accuracy: float | None = None
    tokens_per_second: float | None = None
    samples_per_second: float | None = None
    train_runtime_seconds: float | None = None
    global_step: int | None = None
    epochs: float | None = None
    resumed: bool | None = None
    resumed_from_step: int | None = None  # the checkpoint's step a resumed run (in-job restart or attempt) went on from


class Scores(Lenient):
    """One model's scores on the evaluation samples: loss on the reference descriptions, and its own
    greedy descriptions against them (ROUGE-L F1 in 0..1, corpus BLEU in 0..100)."""

    eval_loss: float | None = None
    rougeL: float | None = None
    bleu: float | None = None


LOWER_WINS = frozenset({"eval_loss"})  # metrics where lower is better


class Evaluation(Lenient):
    """The new adapter (challenger) against the baseline on the same held-out samples: the champion's
    adapter as it was when the run started, or the base model when the config name had none."""

    samples: int
    challenger: Scores
    baseline: Scores
    baseline_kind: str  # "champion" | "base"
    champion_run_id: str | None = None  # the champion evaluated against (None: the base model)
    report_path: str | None = None  # report.html beside the adapter

    def gain(self, metric: str) -> float | None:
        """How much the challenger beats the baseline on `metric` (positive: better; eval_loss wins lower);
        None when either was not measured. The champion rule (functions/core/champion.py) and the report use it."""
        new, old = getattr(self.challenger, metric), getattr(self.baseline, metric)
        if new is None or old is None:
            return None
        return float(old - new if metric in LOWER_WINS else new - old)


class TrialResult(Lenient):
    """One trial of a sweep: its values, how it ended, and its sweep metric at each evaluation."""

    trial_id: str
    params: dict[str, Any]  # dotted field -> the value this trial trained with
    state: str  # finished | stopped (early, by the scheduler) | failed | unfinished
    metric: float | None = None  # the sweep's metric: a finished trial's final adapter's, else its last reported
    history: list[dict[str, float]] = []  # at each evaluation: step, and the losses reported there
    stopped_at_step: int | None = None  # the step of its last evaluation, where the scheduler stopped it
    wall_seconds: float | None = None
    node_seconds: float | None = None  # the nodes it held (scaling.nodes) x its time: what a trial is charged on
    gpu_seconds: float | None = None  # its GPUs (scaling.nodes x gpus_per_node) x its time; 0 on CPU
    adapter_path: str | None = None
    error: str | None = None


class SweepResult(Lenient):
    metric: str  # what ranked the trials
    mode: str  # min | max
    stopped_on: str | None = None  # the metric the scheduler compared trials on at each evaluation (None: none)
    best_trial: str | None = None  # its adapter is the run's adapter_path
    trials: list[TrialResult] = []
    report_path: str | None = None  # report.html in the run's folder: the trials as a table and plots


class TrackedRun(Lenient):
    """The run in one tracking destination (functions/core/tracking.py): where it is, and what did not reach it."""

    run_id: str | None = None  # the destination's own run id (None: it could not be opened)
    experiment_id: str | None = None
    url: str | None = None  # its page, where the destination has one
    uri: str | None = None  # the tracking server or store it went to
    points: int = 0  # metric values logged
    undelivered: int = 0  # of those, not delivered (the destination down or slow)
    error: str | None = None  # the last failure, redacted

    def merged(self, later: TrackedRun) -> TrackedRun:
        """The worker's part and the driver's end of one tracked run, as one."""
        return TrackedRun(
            run_id=later.run_id or self.run_id,
            experiment_id=later.experiment_id or self.experiment_id,
            url=later.url or self.url,
            uri=later.uri or self.uri,
            points=self.points + later.points,
            undelivered=self.undelivered + later.undelivered,
            error=self.error or later.error,
        )


class RunResult(Lenient):
    run_id: str | None = None
    written_by: str | None = None  # the trainer's release (functions/core/release.py); None: one before versions
    name: str | None = None
    model: str | None = None
    workers: int | None = None
    storage_path: str | None = None
    adapter_path: str | None = None  # the final adapter with its processor (PeftModel.from_pretrained)
    tensorboard_path: str | None = None
    final_checkpoint: str | None = None
    best_checkpoint: str | None = None
    checkpoints: list[str] = []
    metrics: RunMetrics = RunMetrics()
    evaluation: Evaluation | None = None
    init_adapter: str | None = None  # the adapter training continued from (training.init_adapter)
    merged_path: str | None = None  # export.merged: base + adapter as one safetensors model
    hub_repo: str | None = None  # export.hub_repo it was pushed to
    hub_revision: str | None = None  # the commit the push made there
    wall_seconds: float | None = None
    # Where the job's own time went, phase by phase in order (seconds): the driver's (preflight, starting the
    # workers) and rank 0's (loading the model, preparing the samples, training, the final report).
    timings: dict[str, float] = {}
    sweep: SweepResult | None = None  # a sweep's trials; the fields above are then its best trial's
    tracking: dict[str, TrackedRun] = {}  # destination -> the run there (tracking:), for a sweep its parent


# Progress lines: rank 0 of the trainer prints `RAYTUNE_PROGRESS {...}` at every log and evaluation.
PROGRESS_MARKER = "RAYTUNE_PROGRESS "
# Phase lines: the driver and rank 0 print `RAYTUNE_PHASE {"phase": ...}` as a phase of the job starts, and again
# with its `seconds` when it ends, so the time before the first step is never silent.
PHASE_MARKER = "RAYTUNE_PHASE "


class Phase(Lenient):
    phase: str
    seconds: float | None = None  # None: it has just begun
    trial: str | None = None  # a sweep's trial it is of


class Progress(Lenient):
    trial: str | None = None  # a sweep's trial it is of
    stopped_early: str | None = None  # a sweep's scheduler stopped the trial here, and why
    step: int
    max_steps: int
    epoch: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    loss: float | None = None
    eval_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    mean_token_accuracy: float | None = None
