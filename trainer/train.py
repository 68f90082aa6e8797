"""The RayJob entrypoint: `python -m trainer.train --run-id ID --config-json JSON` (or --config FILE).

Ray Train on Ray's torch backend (workers = nodes x GPUs per node) running TRL's SFTTrainer with a PEFT LoRA
adapter (QLoRA when configured). Checkpoints go to <storage_path>/<run_id>/ through Ray Train; a
restarted worker group resumes from the latest one. At the end: the final adapter under
<storage_path>/<run_id>/adapter/, a result.json summary beside it, and a completion notice on the
watch topic so the controller scales the GPUs down at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

from functions.core.config import TINY_MODEL, RunConfig
from functions.core.result import (
    CHAMPION_ENV,
    TRIAL_DRIVER_RESOURCE,
    TRIAL_DRIVERS,
    WORKER_RESOURCE_ENV,
    Evaluation,
    RunMetrics,
    RunResult,
)
from trainer.codehash import ROOT, code_files, code_sha256
from trainer.export import MERGED_DIR
from trainer.generate import PROMPTS_FILE
from trainer.report import REPORT_FILE

log = logging.getLogger("raytune.trainer")
CODE_WAIT_S = 180  # kubelet refreshes ConfigMap volumes within about a minute
ADAPTER_DIR = "adapter"
BASE_DIR = "base-model"  # the tiny model's weights, kept with its adapter
RESULT_FILE = "result.json"

TENSORBOARD_DIR = "tensorboard"
NOTICE_TIMEOUT_S = 30
# Ray Train sends a worker's print() to its logger as well as to stdout when sys.stdout is wrapped, and Ray's
# workers always wrap it: every line the job prints (its progress, Hugging Face's logs) reached the driver's log
# twice, once from the worker's stdout and once from its stderr. Off, a print is one line; Ray Train passes the
# setting from the driver to its controller and workers.
PRINT_PATCH_ENV = "RAY_TRAIN_ENABLE_PRINT_PATCH"
DEDUP_LOGS_ENV = "RAY_DEDUP_LOGS"


def check_code(expected: str | None, root: Path = ROOT, wait_s: float = CODE_WAIT_S) -> None:
    """Refuse to train on other code than the controller submitted (a ConfigMap volume not yet updated)."""
    if not expected:
        return
    deadline = time.monotonic() + wait_s
    while (actual := code_sha256(code_files(root))) != expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"code under {root} has sha256 {actual}, the RayJob expects {expected}")
        time.sleep(5)


# --- per worker --------------------------------------------------------------------------------


def _report_callback():
    import ray.train
    from ray.train.huggingface.transformers import RayTrainReportCallback

    class RankZeroReportCallback(RayTrainReportCallback):
        """Only rank 0 hands its checkpoint to Ray Train (every rank still reports, as Ray requires):
        the Trainer writes one checkpoint, and multi-node workers must not upload copies of it."""

        def on_save(self, args, state, control, **kwargs):
            if ray.train.get_context().get_world_rank() == 0:
                return super().on_save(args, state, control, **kwargs)
            metrics = {}
            for entry in state.log_history:
                metrics.update(entry)
            ray.train.report(metrics=metrics, checkpoint=None)

    return RankZeroReportCallback()


def _preemption_checkpoints(cfg: RunConfig, model):
    """Checkpoints beside the save strategy: every training.checkpoint_every_steps, or on Spot capacity every
    Young's interval (trainer/checkpoints.py), fixed after the first steps are timed and broadcast from rank 0,
    so every rank saves at the same steps (Ray Train needs each rank's report of a checkpoint)."""
    every = cfg.training.checkpoint_every_steps
    if every == 0 or (every is None and not cfg.scaling.on_spot):
        return None
    import torch
    from transformers import TrainerCallback

    from trainer.checkpoints import CALIBRATION_STEPS, preemption_interval_steps

    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    class PreemptionCheckpoints(TrainerCallback):
        def __init__(self) -> None:
            self.every, self.timed_from = every, 0.0

        def on_step_end(self, args, state, control, **kwargs):
            if self.every is None and state.global_step == 1:
                self.timed_from = time.monotonic()
            elif self.every is None and state.global_step == 1 + CALIBRATION_STEPS:
                step_s = (time.monotonic() - self.timed_from) / CALIBRATION_STEPS
                chosen = [preemption_interval_steps(trainable, step_s, cfg.scaling.nodes)]
                if torch.distributed.is_available() and torch.distributed.is_initialized():
                    torch.distributed.broadcast_object_list(chosen, src=0)
                self.every = chosen[0]
                if state.is_world_process_zero:
                    print(f"checkpoints every {self.every} steps on Spot ({step_s:.2f} s a step)", flush=True)
            if self.every and state.global_step % self.every == 0:
                control.should_save = True
            return control

    return PreemptionCheckpoints()


def sft_config(cfg: RunConfig, output_dir: str, evaluate: bool):
    from trl import SFTConfig

    t = cfg.training
    workers = t.loader_workers(cfg.scaling.use_gpu)
    return SFTConfig(
        # Evaluated right before each save, so every checkpoint carries its eval loss.
        eval_strategy=t.save_strategy if evaluate else "no",
        eval_steps=t.save_steps if evaluate and t.save_strategy == "steps" else None,
        per_device_eval_batch_size=t.per_device_batch_size,
        output_dir=output_dir,
        num_train_epochs=t.epochs,
        max_steps=t.max_steps or -1,
        per_device_train_batch_size=t.per_device_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        gradient_checkpointing=t.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if t.gradient_checkpointing else None,
        optim=t.optim,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_ratio,  # transformers 5: a float below 1 is a ratio of the total steps
        max_grad_norm=t.max_grad_norm,
        logging_steps=t.logging_steps,
        save_strategy=t.save_strategy,
        save_steps=t.save_steps or 500,
        bf16=cfg.model.dtype == "bfloat16",
        fp16=cfg.model.dtype == "float16",
        use_cpu=not cfg.scaling.use_gpu,
        seed=t.seed,
        report_to=["tensorboard"],
        # Our collator renders, tokenizes, truncates to max_length and masks labels itself.
        dataset_kwargs={"skip_prepare_dataset": True},
        remove_unused_columns=False,
        max_length=None,
        ddp_find_unused_parameters=False,
        disable_tqdm=True,
        # The collator (chat template, tokenization, image decode and resize to 896 px: ~50 ms a sample at
        # real size) runs in these processes, overlapping the GPU's step instead of preceding it.
        dataloader_num_workers=workers,
        dataloader_persistent_workers=workers > 0,
        dataloader_prefetch_factor=2 if workers > 0 else None,
        dataloader_pin_memory=cfg.scaling.use_gpu,
    )


def gpu_device(cfg: RunConfig):
    """This worker's GPU (Ray Train assigns one a worker), None on CPU."""
    if not cfg.scaling.use_gpu:
        return None
    import ray.train.torch

    return ray.train.torch.get_device()


def train_loop(loop_config: dict) -> None:
    import ray.train

    from trainer import progress

    cfg = RunConfig.model_validate(loop_config["config"])
    context = ray.train.get_context()
    timeline = progress.Timeline(shown=context.get_world_rank() == 0)
    # The driver began this phase before Ray Train started the workers (one clock on one machine, NTP on GKE).
    timeline.ended(loop_config["starting"], time.time() - loop_config["fit_started"])
    with timeline.phase("importing torch, transformers, trl and peft"):
        hide_unused_bitsandbytes(cfg)
        for module in ("trl", "peft", "ray.train.huggingface.transformers", "trainer.collator", "trainer.data"):
            importlib.import_module(module)
    from trainer import model as models
    from trainer import staging

    output_dir = tempfile.mkdtemp(prefix=f"{loop_config['run_id']}-rank{context.get_world_rank()}-")
    os.environ["TENSORBOARD_LOGGING_DIR"] = os.path.join(output_dir, TENSORBOARD_DIR)
    with timeline.phase("getting the model's files"):
        source, origin = models.node_source(cfg.model, cfg.storage_path, loop_config["tiny_folder"], context)
    if timeline.shown:
        print(f"model {cfg.model.id}: {origin}", flush=True)
    try:
        _train(loop_config, cfg, context, timeline, source, output_dir)
    finally:
        staging.finish()  # a copy of the model this worker stages for the next runs, uploaded while it trained
        if cfg.model.id == TINY_MODEL and context.get_local_rank() == 0:
            shutil.rmtree(source, ignore_errors=True)  # built for this run (kept with its adapter)
        shutil.rmtree(output_dir, ignore_errors=True)  # Ray Train has copied what it keeps


def hide_unused_bitsandbytes(cfg: RunConfig) -> None:
    """peft and transformers import bitsandbytes whenever it is installed (about 1-2 s a process here); a run
    that neither quantizes nor uses its 8-bit optimizer gets it hidden, as if it were not installed
    (importlib's find_spec answers None for a None entry of sys.modules)."""
    if cfg.model.quantization == "none" and cfg.training.optim != "paged_adamw_8bit":
        sys.modules.setdefault("bitsandbytes", None)  # type: ignore[arg-type]  # None: "not installed"


def _train(loop_config: dict, cfg: RunConfig, context: Any, timeline: Any, source: str, output_dir: str) -> None:
    import ray.train
    from ray.train.huggingface.transformers import prepare_trainer
    from trl import SFTTrainer

    from trainer import data, progress
    from trainer import model as models
    from trainer.collator import VisionSFTCollator

    with timeline.phase("loading the processor"):
        processor = models.load_processor(cfg.model, source)
    collator = VisionSFTCollator(
        processor, cfg.dataset, cfg.prompts, cfg.training.max_length, assistant_only=cfg.training.assistant_only_loss
    )
    with timeline.phase("preparing the samples"):
        train_set, eval_set = data.split(data.load(cfg.dataset, seed=cfg.training.seed), cfg.dataset)
    champion = loop_config["champion"]
    with timeline.phase("loading the model"):
        model = models.load_model(cfg.model, source, device=gpu_device(cfg))
    init = models.init_adapter(cfg.training, champion)
    timeline.begun("preparing the trainer")
    prepared = time.monotonic()
    trainer = SFTTrainer(
        model=models.warm_start(model, init) if init else model,
        args=sft_config(cfg, output_dir, evaluate=eval_set is not None),
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=collator,
        processing_class=processor,
        peft_config=None if init else models.lora_config(cfg.lora),
    )
    trainer.add_callback(_report_callback())
    trainer.add_callback(progress.callback(loop_config.get("trial")))
    if (checkpoints := _preemption_checkpoints(cfg, model)) is not None:
        trainer.add_callback(checkpoints)
    trainer = prepare_trainer(trainer)
    checkpoint = ray.train.get_checkpoint()
    timeline.ended("preparing the trainer", time.monotonic() - prepared)
    timeline.begun(f"training on {len(train_set)} samples")
    started = time.monotonic()
    resumed_from = None
    if checkpoint:
        with checkpoint.as_directory() as restored:
            state = Path(restored, "checkpoint", "trainer_state.json")
            resumed_from = json.loads(state.read_text()).get("global_step") if state.exists() else None
            if context.get_world_rank() == 0:
                print(f"resuming from {checkpoint.path} at step {resumed_from}", flush=True)
            trainer.train(resume_from_checkpoint=os.path.join(restored, "checkpoint"))
    else:
        trainer.train()
    timeline.ended(f"training on {len(train_set)} samples", time.monotonic() - started)
    final: dict[str, Any] = {k: v for k, v in trainer.state.log_history[-1].items() if isinstance(v, (int, float))}
    logged = [entry for entry in trainer.state.log_history if "num_tokens" in entry]
    final.update(
        num_tokens=logged[-1]["num_tokens"] if logged else None,
        mean_token_accuracy=next(
            (e["mean_token_accuracy"] for e in reversed(logged) if "mean_token_accuracy" in e), None
        ),
        global_step=trainer.state.global_step,
        epoch=trainer.state.epoch,
        resumed=checkpoint is not None,
        resumed_from_step=resumed_from,
        loop_seconds=time.monotonic() - started,
        world_size=context.get_world_size(),
        init_adapter=init,
    )
    if context.get_world_rank() != 0:
        ray.train.report(metrics={"final": final}, checkpoint=None)
    else:
        final_adapter = FinalAdapter(trainer, processor, collator, eval_set, champion, cfg, source)
        final_adapter.report(loop_config["run_id"], final, os.environ["TENSORBOARD_LOGGING_DIR"], timeline)


@dataclasses.dataclass
class FinalAdapter:
    """Rank 0's last report: the trained adapter (with the processor and the prompts, ready to load and use),
    its evaluation and report.html, the merged export and the TensorBoard logs, handed to Ray Train,
    which stores them under the run's storage path. The tiny model has no hub id: its base weights go
    with the adapter, which points at them."""

    trainer: Any
    processor: Any
    collator: Any
    eval_set: Any
    champion: dict | None
    cfg: RunConfig
    source: str

    def report(self, run_id: str, final: dict, tensorboard_dir: str, timeline: Any) -> None:
        import ray.train

        from trainer import export
        from trainer import report as html_report
        from trainer.evaluate import evaluate

        cfg = self.cfg
        with tempfile.TemporaryDirectory() as staging:
            adapter = Path(staging, ADAPTER_DIR)
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            with timeline.phase("saving the adapter"):
                if cfg.model.id == TINY_MODEL:
                    shutil.copytree(self.source, Path(staging, BASE_DIR))
                    model.peft_config["default"].base_model_name_or_path = f"../{BASE_DIR}"
                else:
                    model.peft_config["default"].base_model_name_or_path = cfg.model.id
                model.save_pretrained(adapter)
                self.processor.save_pretrained(adapter)
                (adapter / PROMPTS_FILE).write_text(cfg.prompts.model_dump_json(indent=2))
            if cfg.evaluation.samples:
                with timeline.phase(f"evaluating on {cfg.evaluation.samples} samples"):
                    evaluation, samples = evaluate(
                        model, self.processor, self.collator, self.eval_set, cfg, self.champion
                    )
                    Path(staging, REPORT_FILE).write_text(html_report.render(run_id, cfg, evaluation, samples, final))
                final["evaluation"] = evaluation.model_dump(mode="json")
            if cfg.export.merged:
                with timeline.phase("exporting the merged model"):
                    folder = export.merged(adapter, self.source, cfg, Path(staging, export.MERGED_DIR))
                    final["merged"] = True
                    if cfg.export.hub_repo:
                        message = f"raytune {run_id}: {cfg.model.id} merged with its adapter"
                        final["hub_revision"] = export.push(folder, cfg.export.hub_repo, message)
            if os.path.isdir(tensorboard_dir):
                shutil.copytree(tensorboard_dir, Path(staging, TENSORBOARD_DIR))
            final["timings"] = timeline.seconds
            final["reported_at"] = time.time()  # the driver times the checkpoint's upload and Ray Train's end
            ray.train.report(metrics={"final": final}, checkpoint=ray.train.Checkpoint.from_directory(staging))


# --- driver -------------------------------------------------------------------------------------


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
        adapter_path=uri(result.checkpoint, ADAPTER_DIR),
        tensorboard_path=uri(result.checkpoint, TENSORBOARD_DIR),
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
    )


def storage_of(cfg: RunConfig) -> str:
    """Where the run keeps checkpoints: the controller resolves it before submitting (RunConfig.with_storage)."""
    if cfg.storage_path is None:
        raise ValueError("storage_path is not set: the controller (or raytune local) resolves it before the job")
    return cfg.storage_path


def run_folder(cfg: RunConfig, run_id: str) -> str:
    """<storage_path>/<run_id>: where a run (or a sweep's trial) keeps its checkpoints, adapter and result."""
    return f"{storage_of(cfg).rstrip('/')}/{run_id}"


def write_result(summary: RunResult, cfg: RunConfig, run_id: str) -> None:
    """<storage>/<run_id>/result.json, which the watcher copies into the run record."""
    from trainer.storage import filesystem

    uri = f"{run_folder(cfg, run_id)}/{RESULT_FILE}"
    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)  # a local folder; on GCS only a marker object
    with fs.open_output_stream(path) as out:
        out.write(summary.model_dump_json(indent=2).encode())


def notify(run_id: str, outcome: str) -> None:
    """Tell the watcher the job is ending, so it reconciles (and scales down) now, not at the next tick."""
    topic = os.environ.get("RAYTUNE_WATCH_TOPIC")
    if not topic:
        return
    try:
        from google.cloud import pubsub_v1

        message = json.dumps({"kind": "finished", "run_id": run_id, "outcome": outcome}).encode()
        pubsub_v1.PublisherClient().publish(topic, message).result(timeout=NOTICE_TIMEOUT_S)
    except Exception as exc:
        log.warning("completion notice to %s failed: %s", topic, exc)


def run(cfg: RunConfig, run_id: str) -> RunResult:
    import ray

    from trainer import preflight, progress

    started = time.monotonic()
    timeline = progress.Timeline()
    with timeline.phase("preflight"):
        preflight.check(cfg.model, cfg.dataset)
    with timeline.phase("connecting to Ray"):
        # A cluster of this product's has its head advertise the trial drivers' resource; one Ray starts here for
        # this job alone (no RAY_ADDRESS: `python -m trainer.train` by hand) is given it too.
        own = {} if os.environ.get("RAY_ADDRESS") else {"resources": {TRIAL_DRIVER_RESOURCE: TRIAL_DRIVERS}}
        ray.init(ignore_reinit_error=True, log_to_driver=True, **own)
    if cfg.scaling.use_gpu:
        with timeline.phase("checking the GPU driver"):
            preflight.gpu_driver_check(cfg.scaling)
    os.environ.setdefault(PRINT_PATCH_ENV, "0")
    # The champion to warm-start from and evaluate against: the driver's environment, not every worker's.
    champion = json.loads(os.environ[CHAMPION_ENV]) if os.environ.get(CHAMPION_ENV) else None
    if cfg.sweep is not None:
        from trainer import sweep

        summary = sweep.run(cfg, run_id, champion, timeline)
    else:
        summary = fit(cfg, run_id, champion, timeline)
    summary.wall_seconds = time.monotonic() - started
    write_result(summary, cfg, run_id)
    return summary


def fit(
    cfg: RunConfig,
    run_id: str,
    champion: dict | None,
    timeline: Any,
    callbacks: list | None = None,
    trial: bool = False,
) -> RunResult:
    """One Ray Train run of `cfg` as `run_id` under its storage_path, to its summary (result.json's contents):
    a run's, or a sweep's `trial` (`callbacks` then hand its reports to Ray Tune; its progress lines name it)."""
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
        "trial": run_id if trial else None,
        # Where each node's workers build tiny://gemma3 (a hub model loads from its id).
        "tiny_folder": os.path.join(tempfile.gettempdir(), f"tiny-gemma3-{run_id}-{uuid.uuid4().hex[:8]}"),
        "starting": starting,  # rank 0 ends this phase: its loop has begun
        "fit_started": time.time(),
    }
    # TorchTrainer with its torch backend configured here without torch (trainer/torch_backend.py), and without
    # the helper actors it would start for nothing here (trainer/ray_trainer.py)
    trainer = DataParallelTrainerWithoutHelpers(
        train_loop,
        train_loop_config=loop_config,
        backend_config=TorchBackendConfig.for_workers(cfg.scaling.use_gpu),
        scaling_config=scaling_config,
        run_config=run_config,
        trial=trial,
    )
    result = trainer.fit()
    before, after = dict(timeline.seconds), progress.Timeline(shown=timeline.shown)
    if reported_at := result.metrics.get("final", {}).get("reported_at"):
        after.ended("storing the adapter and stopping the workers", time.time() - reported_at)
    with after.phase("pruning the checkpoints"):
        checkpoints, score = training_checkpoints(result)
        checkpoints = prune(checkpoints, score, cfg.training.keep_checkpoints)
    summary = summarize(result, cfg, run_id, time.monotonic() - started, checkpoints, score)
    # In the order they ran: the driver's start, the workers' phases (rank 0's), the driver's end.
    summary.timings = {**before, **summary.timings, **after.seconds}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainer.train", description=__doc__)
    parser.add_argument("--run-id", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config-json")
    source.add_argument("--config")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = RunConfig.model_validate_json(args.config_json if args.config_json else Path(args.config).read_text())
    if not cfg.storage_path:
        parser.error("the config has no storage_path (the controller fills it in)")
    check_code(os.environ.get("RAYTUNE_CODE_SHA256"))
    if cfg.sweep is not None:
        # Ray folds lines that differ only in their numbers into one, so the trials' progress lines would be lost;
        # read when Ray is imported.
        os.environ.setdefault(DEDUP_LOGS_ENV, "0")
    try:
        summary = run(cfg, args.run_id)
    except BaseException:
        notify(args.run_id, "failed")
        raise
    notify(args.run_id, "succeeded")
    print(summary.model_dump_json(indent=2))
    return 0


def leave(code: int) -> NoReturn:
    """The end of a driver whose run is over: Ray disconnected and every stream flushed, then out without the
    interpreter's teardown of torch and the rest of the ML stack (1.3 s of a driver's 1.7 s exit here, which the
    job's end waits for). A run that raised leaves the usual way, with its traceback."""
    import ray

    ray.shutdown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
