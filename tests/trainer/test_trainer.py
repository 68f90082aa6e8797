"""Real Ray Train runs on CPU (2 workers over gloo) of the tiny Gemma 3: checkpoints, result.json,
the adapter, QLoRA through bitsandbytes, and resume after a worker is killed."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import psutil
import pytest

from functions.core.config import RunConfig
from functions.core.result import ATTEMPT_ENV
from tests.trainer.jobs import finish, start_job
from trainer.codehash import code_files, code_sha256
from trainer.train import check_code

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def tiny_config(storage: Path, **training) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "tiny-test",
            "model": {"id": "tiny://gemma3", "dtype": "float32", "quantization": "none"},
            "dataset": {"id": "tiny://products", "max_samples": 24},
            "lora": {"modules_to_save": ["lm_head", "embed_tokens"]},  # the recipe's full copies still work
            "training": {
                "epochs": 2,
                "per_device_batch_size": 2,
                "gradient_accumulation_steps": 1,
                "optim": "adamw_torch",
                "max_length": 256,
                "logging_steps": 2,
                "dataloader_workers": 1,  # the collator in a worker process, as on GPU runs
                **training,
            },
            "scaling": {"nodes": 2, "gpus_per_node": 0, "max_failures": 1},
            "storage_path": str(storage),
        }
    )


def test_ray_train_qlora_run_writes_checkpoints_result_and_adapter(tmp_path):
    cfg = tiny_config(tmp_path / "store")
    cfg = cfg.model_copy(
        update={
            "model": cfg.model.model_copy(update={"quantization": "nf4"}),
            "dataset": cfg.dataset.model_copy(update={"max_samples": 30, "eval_fraction": 0.2}),
        }
    )
    log, home = tmp_path / "job.log", tmp_path / "home"
    home.mkdir()
    # Submitted as the run's attempt 2 whose attempt 1 saved nothing: the job says it trains from the start.
    finish(start_job(cfg, "tiny-qlora", log, env={"HOME": str(home), ATTEMPT_ENV: "2"}), log)
    assert not list(home.iterdir()), "the job wrote to the home directory"  # e.g. Ray's ~/.ray/auth_token
    assert "attempt 2: no checkpoint of this run was saved; training from step 0" in log.read_text()
    result = json.loads((tmp_path / "store" / "tiny-qlora" / "result.json").read_text())
    metrics = result["metrics"]
    # The samples whose product name hashes under 0.2 are held out; the rest over 2 workers x batch 2, 2 epochs.
    from trainer import data

    train, held_out = data.split(data.load(cfg.dataset, seed=cfg.training.seed), cfg.dataset)
    assert len(train) + len(held_out) == 30 and len(held_out) > 0
    assert metrics["global_step"] == 2 * math.ceil(math.ceil(len(train) / 2) / 2) and metrics["epochs"] == 2
    # Each checkpoint was evaluated on the held-out samples; the best one is the lowest eval loss.
    assert metrics["best_checkpoint_by"] == "eval_loss" and 0 < metrics["best_checkpoint_score"] < 20
    assert metrics["num_tokens"] > 1000 and metrics["tokens_per_second"] > 0 and metrics["samples_per_second"] > 0
    assert 0 < metrics["train_loss"] < 20 and metrics["resumed"] is False
    assert len(result["checkpoints"]) == 2  # one a epoch
    for checkpoint in result["checkpoints"]:
        assert (Path(checkpoint) / "adapter_model.safetensors").exists()
        assert (Path(checkpoint) / "trainer_state.json").exists()
    assert (
        result["best_checkpoint"] in result["checkpoints"] and result["final_checkpoint"] == result["checkpoints"][-1]
    )
    assert list(Path(result["tensorboard_path"]).rglob("events.out.tfevents.*"))  # the run's TensorBoard logs
    adapter = Path(result["adapter_path"])
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["task_type"]) == (16, 16, "CAUSAL_LM")
    assert set(config["modules_to_save"]) == {"lm_head", "embed_tokens"}
    # The adapter loads onto the base model and generates.
    from peft import PeftModel
    from transformers import AutoProcessor

    from trainer import tiny
    from trainer.model import load_model

    processor = AutoProcessor.from_pretrained(adapter)
    base = load_model(cfg.model.model_copy(update={"quantization": "none"}), str(tiny.save(tmp_path / "base")))
    tuned = PeftModel.from_pretrained(base, adapter)
    row = tiny.product_rows(1)[0]
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": row["Product Name"]}, {"type": "image"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    inputs = processor(text=[text], images=[[row["image"]]], return_tensors="pt")
    out = tuned.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5 or processor.tokenizer.eos_token_id in out[0].tolist()


def test_resume_after_a_killed_worker(tmp_path):
    store = tmp_path / "store"
    cfg = tiny_config(
        store,
        epochs=1,
        max_steps=40,
        per_device_batch_size=1,
        save_strategy="steps",
        save_steps=8,
        logging_steps=4,
        keep_checkpoints=2,
    )
    log = tmp_path / "job.log"
    proc = start_job(cfg, "tiny-resume", log)
    deadline = time.monotonic() + 300
    # Kill once Ray has registered a checkpoint (its snapshot lists it), not merely when one is on disk.
    snapshot = store / "tiny-resume" / "checkpoint_manager_snapshot.json"

    def registered() -> int:
        try:
            return len(json.loads(snapshot.read_text())["checkpoint_results"])
        except (OSError, ValueError, KeyError):
            return 0

    while time.monotonic() < deadline and registered() < 1:
        assert proc.poll() is None, log.read_text()[-4000:]
        time.sleep(0.2)
    workers = [
        p for p in psutil.Process(proc.pid).children(recursive=True) if "RayTrainWorker" in " ".join(p.cmdline())
    ]
    assert workers, "no Ray Train worker process found"
    workers[0].kill()
    finish(proc, log)
    result = json.loads((store / "tiny-resume" / "result.json").read_text())
    assert result["metrics"]["resumed"] is True and result["metrics"]["global_step"] == 40
    state = json.loads((Path(result["final_checkpoint"]) / "trainer_state.json").read_text())
    assert state["global_step"] == 40
    # The second attempt went on from a checkpoint: no step was trained twice. (Files of a checkpoint the
    # kill interrupted may lie on disk half-written; only registered checkpoints are read.)
    steps = [json.loads((Path(c) / "trainer_state.json").read_text())["global_step"] for c in result["checkpoints"]]
    assert steps == sorted(set(steps)) and steps[-1] == 40
    # keep_checkpoints=2 of the five: the best and the last stay, the others are deleted.
    assert len(result["checkpoints"]) == 2 and result["best_checkpoint"] in result["checkpoints"]
    on_disk = {str(p) for p in (store / "tiny-resume").glob("checkpoint_*/checkpoint")}
    assert set(result["checkpoints"]) <= on_disk


def test_code_check_refuses_stale_code(tmp_path):
    files = code_files()
    check_code(code_sha256(files))
    check_code(None)
    with pytest.raises(RuntimeError, match="the RayJob expects"):
        check_code("0" * 64, wait_s=0)


def test_a_hub_model_is_fetched_once_per_node_and_staged_for_the_next_run(tmp_path, bucket):
    """A hub id through the whole job, its storage on the GCS emulator: the model's files (the tiny model, served by
    a Hub stand-in) reach the node once, by local rank 0 while rank 1 waits; rank 0 stages them in the bucket
    while it trains, and both ranks train on that folder."""
    from google.cloud import storage

    from tests.fakes.hub_models import FakeModelHub
    from trainer import tiny
    from trainer.staging import MARKER

    folder = tiny.save(tmp_path / "tiny")
    files = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    hub = FakeModelHub("google/gemma-3-4b-it", files)
    cfg = tiny_config(tmp_path / "unused", max_steps=2, epochs=1)
    cfg = cfg.model_copy(
        update={
            "model": cfg.model.model_copy(update={"id": "google/gemma-3-4b-it"}),
            "storage_path": f"gs://{bucket}/checkpoints",
        }
    )
    log = tmp_path / "job.log"
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "local-ssd" / "hf"),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    try:
        finish(start_job(cfg, "hub-model", log, env=env), log)
    finally:
        hub.shutdown()
    weights = len(files["model.safetensors"])
    assert weights <= hub.served_bytes < 2 * weights, "one download for the node's two workers"
    staged = f"checkpoints/_models/google/gemma-3-4b-it/{hub.commit}"
    gcs = storage.Client().bucket(bucket)
    assert json.loads(gcs.blob(f"{staged}/{MARKER}").download_as_bytes())["files"]["model.safetensors"] == weights
    assert gcs.blob(f"{staged}/model.safetensors").download_as_bytes() == files["model.safetensors"]
    assert f"model google/gemma-3-4b-it: from the Hub, staging a copy as gs://{bucket}/{staged}" in log.read_text()
    result = json.loads(gcs.blob("checkpoints/hub-model/result.json").download_as_bytes())
    assert result["metrics"]["global_step"] == 2
