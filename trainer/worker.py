"""One Ray Train worker's part of a run (Ray Train runs `train_loop` on every worker): TRL's SFTTrainer with
a PEFT LoRA adapter (QLoRA when configured), resumed from the latest checkpoint where there is one, reporting
to Ray Train; rank 0 stores the final adapter, its evaluation, report and exports in the run folder's layout
(functions/core/result.py)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from functions.core.config import TINY_MODEL, RunConfig
from functions.core.result import ADAPTER_DIR, BASE_DIR, TENSORBOARD_DIR
from trainer.generate import PROMPTS_FILE
from trainer.report import REPORT_FILE


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
    timeline = progress.Timeline(shown=context.get_world_rank() == 0, trial=loop_config.get("trial"))
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
    """torchtune's recipe phases (recipes/lora_finetune_distributed.py): set up, build the trainer, train, and
    the final report; rank 0 tracks the run where the config says (trainer/tracking.py)."""
    import ray.train

    from trainer import trackers, tracking

    rank0 = context.get_world_rank() == 0
    who = tracking.Identity(**loop_config["tracking"]) if loop_config.get("tracking") else None
    loggers = trackers.open_loggers(cfg, who) if rank0 and who is not None else []
    parts = _set_up(cfg, timeline, source, loop_config["champion"])
    trainer = _trainer(cfg, parts, output_dir, timeline, loop_config.get("trial"), loggers)
    final = _trained(trainer, parts, loop_config.get("attempt", 1), rank0, timeline)
    final.update(world_size=context.get_world_size(), init_adapter=parts.init)
    if not rank0:
        ray.train.report(metrics={"final": final}, checkpoint=None)
        return
    final_adapter = FinalAdapter(trainer, parts.processor, parts.collator, parts.eval_set, parts.champion, cfg, source)
    final_adapter.report(loop_config["run_id"], final, os.environ["TENSORBOARD_LOGGING_DIR"], timeline, loggers)


@dataclasses.dataclass
class Parts:
    """What the set-up phase makes: the processor and collator, the samples, the model and the adapter it
    starts from."""

    processor: Any
    collator: Any
    train_set: Any
    eval_set: Any
    model: Any
    champion: dict | None
    init: str | None


def _set_up(cfg: RunConfig, timeline: Any, source: str, champion: dict | None) -> Parts:
    from trainer import data
    from trainer import model as models
    from trainer.collator import VisionSFTCollator

    with timeline.phase("loading the processor"):
        processor = models.load_processor(cfg.model, source)
    collator = VisionSFTCollator(
        processor, cfg.dataset, cfg.prompts, cfg.training.max_length, assistant_only=cfg.training.assistant_only_loss
    )
    with timeline.phase("preparing the samples"):
        train_set, eval_set = data.split(data.load(cfg.dataset, seed=cfg.training.seed), cfg.dataset)
    with timeline.phase("loading the model"):
        model = models.load_model(cfg.model, source, device=gpu_device(cfg))
    init = models.init_adapter(cfg.training, champion)
    return Parts(processor, collator, train_set, eval_set, model, champion, init)


def _trainer(
    cfg: RunConfig, parts: Parts, output_dir: str, timeline: Any, trial: str | None, loggers: list[Any]
) -> Any:
    """TRL's SFTTrainer with the callbacks: Ray Train's reports, progress lines, tracking, Spot checkpoints."""
    from ray.train.huggingface.transformers import prepare_trainer
    from trl import SFTTrainer

    from trainer import model as models
    from trainer import progress, tracking

    with timeline.phase("preparing the trainer"):
        trainer = SFTTrainer(
            model=models.warm_start(parts.model, parts.init) if parts.init else parts.model,
            args=sft_config(cfg, output_dir, evaluate=parts.eval_set is not None),
            train_dataset=parts.train_set,
            eval_dataset=parts.eval_set,
            data_collator=parts.collator,
            processing_class=parts.processor,
            peft_config=None if parts.init else models.lora_config(cfg.lora),
        )
        trainer.add_callback(_report_callback())
        trainer.add_callback(progress.callback(trial))
        if loggers:
            trainer.add_callback(tracking.callback(loggers))
        if (checkpoints := _preemption_checkpoints(cfg, parts.model)) is not None:
            trainer.add_callback(checkpoints)
        return prepare_trainer(trainer)


def _trained(trainer: Any, parts: Parts, attempt: int, rank0: bool, timeline: Any) -> dict[str, Any]:
    """Training, from the latest checkpoint Ray Train restored where there is one; its final metrics."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    training = f"training on {len(parts.train_set)} samples"
    timeline.begun(training)
    started = time.monotonic()
    resumed_from = None
    if checkpoint:
        with checkpoint.as_directory() as restored:
            state = Path(restored, "checkpoint", "trainer_state.json")
            resumed_from = json.loads(state.read_text()).get("global_step") if state.exists() else None
            if rank0:
                print(f"resuming from {checkpoint.path} at step {resumed_from}", flush=True)
            trainer.train(resume_from_checkpoint=os.path.join(restored, "checkpoint"))
    else:
        if attempt > 1 and rank0:
            # Said, not assumed: "resumes from the last checkpoint" is only true where one was saved.
            print(f"attempt {attempt}: no checkpoint of this run was saved; training from step 0")
        trainer.train()
    timeline.ended(training, time.monotonic() - started)
    history = trainer.state.log_history
    final: dict[str, Any] = {k: v for k, v in history[-1].items() if isinstance(v, (int, float))}
    logged = [entry for entry in history if "num_tokens" in entry]
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
    )
    return final


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

    def report(self, run_id: str, final: dict, tensorboard_dir: str, timeline: Any, loggers: list[Any]) -> None:
        import ray.train

        from trainer import export, tracking
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
            final["tracking"] = tracking.closed(loggers)  # the run's end is logged by the driver, which knows it all
            final["reported_at"] = time.time()  # the driver times the checkpoint's upload and Ray Train's end
            ray.train.report(metrics={"final": final}, checkpoint=ray.train.Checkpoint.from_directory(staging))
