"""One Ray Train run of a config, from the job's driver: its scaling and run configs, the fit on the workers
(trainer/worker.py), its checkpoints kept or pruned, and its summary written as the run folder's result.json
(functions/core/result.py): a run's, or one trial of a sweep's (trainer/sweep.py)."""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
import uuid
from typing import TYPE_CHECKING, Any

from functions.core import release
from functions.core import result as layout
from functions.core.config import RunConfig
from functions.core.result import WORKER_RESOURCE_ENV, Evaluation, RunMetrics, RunResult, TrackedRun
from trainer.export import MERGED_DIR
from trainer.report import REPORT_FILE
from trainer.worker import train_loop

if TYPE_CHECKING:
    from trainer.tracking import Identity

# Ray Train sends a worker's print() to its logger as well as to stdout when sys.stdout is wrapped, and Ray's
# workers always wrap it: every line the job prints (its progress, Hugging Face's logs) reached the driver's log
# twice, once from the worker's stdout and once from its stderr. Off, a print is one line; Ray Train passes the
# setting from the driver to its controller and workers.
PRINT_PATCH_ENV = "RAY_TRAIN_ENABLE_PRINT_PATCH"


def ray_train_configs(cfg: RunConfig, run_id: str, callbacks: list | None = None):
    import ray.train

    from trainer.storage import filesystem

    scaling = cfg.scaling
    resources = {"CPU": scaling.cpus_per_worker, **({"GPU": 1} if scaling.use_gpu else {})}
    # The run's own worker group advertises this resource (functions/core/manifests.py worker_group): its
    # workers land on its nodes only, so the nodes can go exactly when it ends.
    if own := os.environ.get(WORKER_RESOURCE_ENV):
        resources[own] = 1
    scaling_config = ray.train.ScalingConfig(
        num_workers=scaling.num_workers,
        use_gpu=scaling.use_gpu,
        resources_per_worker=resources,
        accelerator_type=scaling.accelerator if scaling.use_gpu else None,
    )
    # The filesystem the trainer's own reads and writes use (the emulator in tests), not one Ray resolves anew.
    storage, path = filesystem(storage_of(cfg))
    run_config = ray.train.RunConfig(
        name=run_id,
        storage_path=path,
        storage_filesystem=storage,
        failure_config=ray.train.FailureConfig(max_failures=scaling.max_failures),
        checkpoint_config=ray.train.CheckpointConfig(num_to_keep=None),
        callbacks=callbacks,
    )
    return scaling_config, run_config


def training_checkpoints(result) -> tuple[list, str]:
    """The training checkpoints in the order written, with their metrics, and the score that ranks them."""
    # Training checkpoints carry the logged losses; the last report is the adapter alone.
    checkpoints = [(c, m) for c, m in (result.best_checkpoints or []) if c is not None and "loss" in m]
    # Best by eval loss among the evaluated checkpoints (those written between evaluations, for a run that may
    # lose its nodes, rank last), else by training loss.
    score = "eval_loss" if any("eval_loss" in m for _, m in checkpoints) else "loss"
    return checkpoints, score


def prune(checkpoints: list, score: str, keep: int | None) -> list:
    """Delete all but `keep` training checkpoints (the best and the last always stay); returns those kept."""
    from trainer.checkpoints import to_delete

    doomed = to_delete([(c, m.get(score, math.inf)) for c, m in checkpoints], keep)
    for checkpoint in doomed:
        checkpoint.filesystem.delete_dir(checkpoint.path)
    return [(c, m) for c, m in checkpoints if c not in doomed]


def unfinished(result) -> list[str]:
    """Checkpoint folders in the run's Ray Train folder that Ray Train never registered: what an upload cut off
    by the job's death left (Ray Train registers a checkpoint only once every file of it is stored, so a resumed
    run never starts from one, but nothing else deletes it). Deleted; their paths returned."""
    import pyarrow.fs

    registered = [result.checkpoint, *(c for c, _ in result.best_checkpoints or [])]
    known = {c.path.rstrip("/") for c in registered if c is not None}
    listed = result.filesystem.get_file_info(pyarrow.fs.FileSelector(result.path, allow_not_found=True))
    left = [
        info.path
        for info in listed
        if info.type == pyarrow.fs.FileType.Directory
        and info.base_name.startswith("checkpoint_")
        and info.path.rstrip("/") not in known
    ]
    for path in left:
        result.filesystem.delete_dir(path)
    return left


def summarize(result, cfg: RunConfig, run_id: str, wall_seconds: float, checkpoints: list, score: str) -> RunResult:
    """result.json: where the adapter and the final and best checkpoints are, and what the run measured."""
    metrics = dict(result.metrics.get("final", {}))
    best = min(checkpoints, key=lambda pair: pair[1].get(score, math.inf))[0] if checkpoints else None
    final = checkpoints[-1][0] if checkpoints else None
    runtime = metrics.get("train_runtime") or metrics.get("loop_seconds")
    tokens = metrics.get("num_tokens")

    def uri(checkpoint, leaf: str) -> str | None:
        if checkpoint is None:
            return None
        path = f"{checkpoint.path.rstrip('/')}/{leaf}"
        return f"gs://{path}" if storage_of(cfg).startswith("gs://") and not path.startswith("gs://") else path

    return RunResult(
        run_id=run_id,
        name=cfg.name,
        model=cfg.model.id,
        workers=cfg.scaling.num_workers,
        storage_path=run_folder(cfg, run_id),
        adapter_path=uri(result.checkpoint, layout.ADAPTER_DIR),
        tensorboard_path=uri(result.checkpoint, layout.TENSORBOARD_DIR),
        final_checkpoint=uri(final, "checkpoint"),
        best_checkpoint=uri(best, "checkpoint"),
        checkpoints=[uri(c, "checkpoint") for c, _ in checkpoints],
        evaluation=(
            Evaluation.model_validate({**metrics["evaluation"], "report_path": uri(result.checkpoint, REPORT_FILE)})
            if metrics.get("evaluation")
            else None
        ),
        init_adapter=metrics.get("init_adapter"),
        merged_path=uri(result.checkpoint, MERGED_DIR) if metrics.get("merged") else None,
        hub_repo=cfg.export.hub_repo if metrics.get("hub_revision") else None,
        hub_revision=metrics.get("hub_revision"),
        metrics=RunMetrics(
            train_loss=metrics.get("train_loss"),
            best_checkpoint_by=score,
            best_checkpoint_score=min(m.get(score, math.inf) for _, m in checkpoints) if checkpoints else None,
            num_tokens=tokens,
            mean_token_accuracy=metrics.get("mean_token_accuracy"),
            tokens_per_second=tokens / runtime if tokens and runtime else None,
            samples_per_second=metrics.get("train_samples_per_second"),
            train_runtime_seconds=runtime,
            global_step=metrics.get("global_step"),
            epochs=metrics.get("epoch"),
            resumed=metrics.get("resumed"),
            resumed_from_step=metrics.get("resumed_from_step"),
        ),
        wall_seconds=wall_seconds,
        timings=metrics.get("timings") or {},
        tracking={name: TrackedRun.model_validate(run) for name, run in (metrics.get("tracking") or {}).items()},
    )


def storage_of(cfg: RunConfig) -> str:
    """Where the run keeps checkpoints: the controller resolves it before submitting (RunConfig.with_storage)."""
    if cfg.storage_path is None:
        raise ValueError("storage_path is not set: the controller (or raytune local) resolves it before the job")
    return cfg.storage_path


def run_folder(cfg: RunConfig, run_id: str) -> str:
    return layout.run_folder(storage_of(cfg), run_id)


def write_result(summary: RunResult, cfg: RunConfig, run_id: str) -> None:
    """<storage>/<run_id>/result.json, which the watcher copies into the run record."""
    from trainer.storage import write_file

    stamped = summary.model_copy(update={"written_by": release.VERSION})
    write_file(f"{run_folder(cfg, run_id)}/{layout.RESULT_FILE}", stamped.model_dump_json(indent=2).encode())


def fit(
    cfg: RunConfig,
    run_id: str,
    champion: dict | None,
    timeline: Any,
    callbacks: list | None = None,
    trial: Identity | None = None,
) -> RunResult:
    """One Ray Train run of `cfg` as `run_id` under its storage_path, to its summary (result.json's contents):
    a run's, or a sweep's `trial` (its tracking identity: `callbacks` then hand its reports to Ray Tune; its
    progress lines name it). A tracked run is ended in its destinations here, whether it succeeds or fails."""
    from trainer import trackers, tracking

    who = trial or tracking.identity(cfg, run_id)
    try:
        summary = _fit(cfg, run_id, champion, timeline, callbacks, who)
    except BaseException:
        if cfg.tracking is not None:
            trackers.ended(cfg, who, None, "FAILED", {})
        raise
    if cfg.tracking is not None:
        summary.tracking = trackers.ended(cfg, who, summary, "FINISHED", summary.tracking)
    return summary


def _fit(
    cfg: RunConfig, run_id: str, champion: dict | None, timeline: Any, callbacks: list | None, who: Identity
) -> RunResult:
    from trainer import progress
    from trainer.ray_trainer import DataParallelTrainerWithoutHelpers
    from trainer.torch_backend import TorchBackendConfig

    started = time.monotonic()
    scaling_config, run_config = ray_train_configs(cfg, run_id, callbacks)
    starting = f"starting {cfg.scaling.num_workers} workers"
    timeline.begun(starting)
    loop_config = {
        "config": cfg.model_dump(mode="json"),
        "run_id": run_id,
        "champion": champion,
        "trial": run_id if who.kind == "trial" else None,
        # Where each node's workers build tiny://gemma3 (a hub model loads from its id).
        "tiny_folder": os.path.join(tempfile.gettempdir(), f"tiny-gemma3-{run_id}-{uuid.uuid4().hex[:8]}"),
        "starting": starting,  # rank 0 ends this phase: its loop has begun
        "fit_started": time.time(),
        "attempt": who.attempt,
        "tracking": dataclasses.asdict(who) if cfg.tracking is not None else None,
    }
    # TorchTrainer with its torch backend configured here without torch (trainer/torch_backend.py), and without
    # the helper actors it would start for nothing here (trainer/ray_trainer.py)
    trainer = DataParallelTrainerWithoutHelpers(
        train_loop,
        train_loop_config=loop_config,
        backend_config=TorchBackendConfig.for_workers(cfg.scaling.use_gpu),
        scaling_config=scaling_config,
        run_config=run_config,
        trial=who.kind == "trial",
    )
    result = trainer.fit()
    before, after = dict(timeline.seconds), progress.Timeline(shown=timeline.shown, trial=timeline.trial)
    if reported_at := result.metrics.get("final", {}).get("reported_at"):
        after.ended("storing the adapter and stopping the workers", time.time() - reported_at)
    with after.phase("pruning the checkpoints"):
        checkpoints, score = training_checkpoints(result)
        checkpoints = prune(checkpoints, score, cfg.training.keep_checkpoints)
        if left := unfinished(result):
            print(f"deleted {len(left)} checkpoint(s) an earlier attempt did not finish storing", flush=True)
    summary = summarize(result, cfg, run_id, time.monotonic() - started, checkpoints, score)
    # In the order they ran: the driver's start, the workers' phases (rank 0's), the driver's end.
    summary.timings = {**before, **summary.timings, **after.seconds}
    return summary
