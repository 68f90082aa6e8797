"""A run that loses a node mid-training finishes in a second attempt that resumes from its checkpoint: the
local stand-in for a Spot preemption (the node's raylet killed, as GKE takes the VM), played through the real
local cluster, the real Ray Train restore and the controller's decisions; then `raytune retry` by hand."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from functions.local import emulators, session
from tests.e2e.test_local import RAYTUNE, finish, start

pytestmark = pytest.mark.slow
CONFIG = {
    "name": "preempted",
    "model": {"id": "tiny://gemma3", "dtype": "float32", "quantization": "none"},
    "dataset": {"id": "tiny://products", "max_samples": 48, "eval_fraction": 0.25},
    "training": {
        "max_steps": 36,
        "per_device_batch_size": 1,
        "optim": "adamw_torch",
        "max_length": 256,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": 6,
    },
    # No in-job restart: the lost node ends the job, and the controller's next attempt resumes it.
    "scaling": {"nodes": 2, "gpus_per_node": 0, "max_failures": 0, "max_attempts": 2},
    "cluster": {"dependencies": "image"},
}


def registered_checkpoints(snapshot: Path) -> int:
    try:
        return len(json.loads(snapshot.read_text())["checkpoint_results"])
    except (OSError, ValueError, KeyError):
        return 0


def worker_raylet(workdir: Path) -> psutil.Process:
    """The raylet of one worker node of the workdir's cluster (a child of its `ray start --address=...`)."""
    tag = session.read(workdir)
    assert tag is not None
    for pid in emulators.tagged(tag.tag):
        try:
            proc = psutil.Process(pid)
            if "raylet" in proc.name() and any(
                "--address=" in " ".join(parent.cmdline()) and "ray start" in " ".join(parent.cmdline())
                for parent in proc.parents()[:1]
            ):
                return proc
        except psutil.Error:
            continue
    raise AssertionError("no worker raylet found")


def test_a_node_lost_mid_training_ends_in_a_second_attempt_from_the_checkpoint(tmp_path):
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    config = tmp_path / "preempted.json"
    config.write_text(json.dumps(CONFIG))
    proc, _ = start(workdir, str(config), "--json", home=home)
    deadline = time.monotonic() + 400
    snapshots = list((workdir / "checkpoints").glob("*/checkpoint_manager_snapshot.json"))
    while time.monotonic() < deadline and not (snapshots and registered_checkpoints(snapshots[0]) >= 1):
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        time.sleep(0.1)
        snapshots = list((workdir / "checkpoints").glob("*/checkpoint_manager_snapshot.json"))
    raylet = worker_raylet(workdir)
    raylet.send_signal(signal.SIGKILL)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-6000:]
    record = json.loads(out)
    run_id = record["run_id"]
    assert record["state"] == "SUCCEEDED", err[-4000:]
    first, second = record["attempts"]
    assert first["number"] == 1 and first["job"] == run_id and first["outcome"].startswith("lost its nodes")
    assert any("exited with" in line and "ray-worker-" in line for line in first["lost"]), first["lost"]
    assert second["number"] == 2 and second["job"] == f"{run_id}-2" and second["outcome"].startswith("SUCCEEDED")
    assert second["submitted_at"] >= first["ended_at"]
    states = [h["state"] for h in record["history"]]
    assert states[:4] == ["RECEIVED", "SUBMITTED", "RUNNING", "QUEUED"] and states[-1] == "SUCCEEDED"
    assert "attempt 1 of 2 lost its nodes" in err and "attempt 2 resumes from the last checkpoint" in err
    # Ray Train's own verdict on the lost worker group is one console line, with its cause (no restart: max_failures 0)
    assert "worker group failure 1 (no restart): " in err and "; giving up" in err, err[-4000:]
    metrics = record["result"]["metrics"]
    assert metrics["resumed"] is True and metrics["global_step"] == 36
    resumed_from = metrics["resumed_from_step"]
    assert resumed_from in range(6, 36, 6)
    # The second attempt's first step is the checkpoint's next: read from its own driver log.
    log = (workdir / "logs" / f"{run_id}-2-driver.log").read_text()
    assert f"at step {resumed_from}" in log
    steps = [int(s) for s in re.findall(r"'step': (\d+)|\"step\": (\d+)|step (\d+)/36", log) for s in s if s]
    assert steps and min(steps) == resumed_from + 1, steps[:5]
    # Every checkpoint of both attempts is one step once: nothing was trained twice past the checkpoint.
    done = [
        json.loads((Path(c) / "trainer_state.json").read_text())["global_step"] for c in record["result"]["checkpoints"]
    ]
    assert done == sorted(set(done)) and done[-1] == 36


def test_retry_by_hand_resumes_a_failed_run(tmp_path):
    """A run that failed (its node lost with no attempts left) is retried with `raytune retry --local`: the same
    run id, attempt 2, resumed from its checkpoint."""
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    config = tmp_path / "once.json"
    config.write_text(json.dumps({**CONFIG, "name": "once", "scaling": {**CONFIG["scaling"], "max_attempts": 1}}))
    proc, _ = start(workdir, str(config), "--json", home=home)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        snapshots = list((workdir / "checkpoints").glob("*/checkpoint_manager_snapshot.json"))
        if snapshots and registered_checkpoints(snapshots[0]) >= 1:
            break
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        time.sleep(0.1)
    worker_raylet(workdir).send_signal(signal.SIGKILL)
    out, err = finish(proc)
    failed = json.loads(out)
    assert proc.returncode == 1 and failed["state"] == "FAILED", err[-4000:]
    assert "no attempts left (scaling.max_attempts 1)" in failed["reason"]
    retried = subprocess.run(
        [RAYTUNE, "retry", failed["run_id"], "--workdir", str(workdir)],
        cwd=home,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert retried.returncode == 0, retried.stderr[-4000:] + retried.stdout[-2000:]
    record = json.loads((workdir / "records" / f"{failed['run_id']}.json").read_text())
    assert record["state"] == "SUCCEEDED" and [a["number"] for a in record["attempts"]] == [1, 2]
    assert record["attempts"][1]["by"] == "raytune retry" and record["result"]["metrics"]["resumed"] is True
