"""A sweep whose job dies (its driver and its Ray gone, as when the controller's next attempt or `raytune retry`
submits it again) is restored from the run's storage by Ray Tune: the finished trial is not trained again, the
interrupted one resumes from its last stored checkpoint (never one whose storing the death cut off), the one not
yet begun runs; the RayJob entrypoint as KubeRay runs it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from functions.core.config import RunConfig
from tests.harness import tiny_checkpointed
from tests.ray_snapshots import registered_checkpoints
from tests.trainer.jobs import finish, start_job

pytestmark = pytest.mark.slow


def sweep_config(storage) -> RunConfig:
    return RunConfig.model_validate(
        tiny_checkpointed(
            "sweep-resume",
            samples=40,
            eval_fraction=0.2,
            max_steps=40,
            training={"logging_steps": 4},
            sweep={
                "space": {"training.learning_rate": {"kind": "loguniform", "low": 1e-4, "high": 1e-3}},
                "trials": 3,
                "concurrent": 1,
                "scheduler": "none",
            },
            storage_path=str(storage),
        )
    )


def cut_off_upload(trial: Path) -> Path:
    """What a job that died while storing a checkpoint leaves in the trial's folder: a newer checkpoint folder
    without its weights, which Ray Train had not registered (it registers one once it is stored)."""
    # Ray Train's checkpoint folders, named by the time they were made (its snapshot file shares the prefix)
    last = max(p for p in trial.glob("checkpoint_*") if p.is_dir())
    partial = trial / "checkpoint_9999-12-31_23-59-59.999999"
    shutil.copytree(last, partial)
    for weights in partial.rglob("adapter_model.safetensors"):
        weights.unlink()
    return partial


def test_a_sweep_whose_job_died_is_restored_without_training_a_finished_trial_again(tmp_path):
    store = tmp_path / "store"
    cfg = sweep_config(store)
    trials = store / "sweep-resume" / "trials"
    first_log = tmp_path / "first.log"
    proc = start_job(cfg, "sweep-resume", first_log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (
        (trials / "trial-000" / "result.json").exists()
        and registered_checkpoints(trials / "trial-001" / "checkpoint_manager_snapshot.json") >= 1
    ):
        assert proc.poll() is None, first_log.read_text()[-4000:]
        time.sleep(0.2)
    written = (trials / "trial-000" / "result.json").stat().st_mtime_ns
    time.sleep(2.5)  # Tune saves its experiment's state every 2 s (trainer/sweep.py): what the restore reads
    with contextlib.suppress(ProcessLookupError):  # the job and its private Ray, all at once
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(AssertionError):
        finish(proc, first_log, timeout=30)
    assert not (trials / "trial-001" / "result.json").exists(), "trial-001 finished before the job was killed"
    partial = cut_off_upload(trials / "trial-001")

    second_log = tmp_path / "second.log"
    finish(start_job(cfg, "sweep-resume", second_log), second_log)
    log = second_log.read_text()
    assert "resuming the sweep from" in log
    assert "trial-000: training.learning_rate=" not in log  # neither drawn again nor trained
    assert (trials / "trial-000" / "result.json").stat().st_mtime_ns == written
    result = json.loads((store / "sweep-resume" / "result.json").read_text())
    swept = {t["trial_id"]: t for t in result["sweep"]["trials"]}
    assert sorted(swept) == ["trial-000", "trial-001", "trial-002"]
    assert all(t["state"] == "finished" for t in swept.values()), swept
    # The upload the job's death cut off was never resumed from (its weights missing, the resume would have
    # failed), and is gone once the trial finished.
    assert not partial.exists() and "deleted 1 checkpoint(s) an earlier attempt did not finish storing" in log
    resumed = json.loads((trials / "trial-001" / "result.json").read_text())["metrics"]
    assert resumed["resumed"] is True and resumed["resumed_from_step"] in range(4, 40, 4)
    assert resumed["global_step"] == 40
    # The draws are the experiment's: the restored trials kept the values the first job drew.
    first = first_log.read_text()
    for trial in ("trial-000", "trial-001"):
        value = swept[trial]["params"]["training.learning_rate"]
        assert f"{trial}: training.learning_rate={value:.3g}" in first
