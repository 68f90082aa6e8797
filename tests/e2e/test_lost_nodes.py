"""A run that loses a node mid-training finishes in a second attempt that resumes from its checkpoint: the
local stand-in for a Spot preemption (the node's raylet killed, as GKE takes the VM), played through the real
local cluster, the real Ray Train restore and the controller's decisions; a run that loses its last attempt too
fails, and `raytune retry` resumes it by hand."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from functions.local import emulators, platform, session
from tests.e2e.test_local import RAYTUNE, finish, start
from tests.harness import tiny_checkpointed
from tests.ray_snapshots import registered_checkpoints

pytestmark = pytest.mark.slow
CONFIG = tiny_checkpointed(
    "preempted",
    samples=48,
    eval_fraction=0.25,
    max_steps=36,
    training={"save_steps": 6},
    # The lost node ends the job, and the controller's next attempt resumes it.
    scaling={"nodes": 2, "max_attempts": 2},
    cluster={"dependencies": "image"},
)


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


def wait_until(proc: subprocess.Popen, what: str, done: Callable[[], bool]) -> None:
    """emulators.wait_until while the run goes on; a run that ends first fails the test with its console."""
    try:
        emulators.wait_until(done, what, timeout_s=400, proc=proc)
    except RuntimeError as ended:
        raise AssertionError(f"{ended}: " + proc.communicate()[1][-4000:]) from None


def steps_in(log: str) -> list[int]:
    """The training steps a driver log shows, as the workers log them and as the console prints them."""
    return [int(s) for s in re.findall(r"'step': (\d+)|\"step\": (\d+)|step (\d+)/36", log) for s in s if s]


def resumed_at(log: str) -> int:
    """The step a resumed attempt's driver log says it starts from, after checking its first step is the next."""
    [step] = set(re.findall(r"resuming from \S+ at step (\d+)", log))
    steps = steps_in(log)
    assert steps and min(steps) == int(step) + 1, steps[:5]  # nothing before the checkpoint is trained again
    return int(step)


def test_a_run_that_loses_its_nodes_resumes_from_its_checkpoint_until_its_attempts_run_out_then_by_hand(tmp_path):
    """Attempt 1 loses a node mid-training: the controller's attempt 2 resumes from the last checkpoint. Attempt 2
    loses one too, with no attempts left (scaling.max_attempts 2): the run FAILS. `raytune retry` then resumes it
    by hand, as attempt 3 of the same run, from the last checkpoint, and it finishes."""
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    config = tmp_path / "preempted.json"
    config.write_text(json.dumps(CONFIG))
    proc, _ = start(workdir, str(config), "--json", home=home)

    def snapshot() -> Path | None:
        return next((workdir / "checkpoints").glob("*/checkpoint_manager_snapshot.json"), None)

    wait_until(proc, "a checkpoint", lambda: (found := snapshot()) is not None and registered_checkpoints(found) >= 1)
    first_raylet = worker_raylet(workdir)
    first_raylet.send_signal(signal.SIGKILL)
    run_id = snapshot().parent.name  # the run's checkpoints folder
    # Attempt 2, on a new node, once it trains past its checkpoint: that node is lost too.

    def second_attempt_trains() -> bool:
        log = platform.live_driver_log(workdir, f"{run_id}-2")
        return log is not None and bool(steps_in(log.read_text(errors="replace")))

    wait_until(proc, "a step of attempt 2", second_attempt_trains)
    second_raylet = worker_raylet(workdir)
    assert second_raylet.pid != first_raylet.pid
    second_raylet.send_signal(signal.SIGKILL)
    out, err = finish(proc)
    failed = json.loads(out)
    assert proc.returncode == 1 and failed["state"] == "FAILED", err[-6000:]
    assert "no attempts left (scaling.max_attempts 2)" in failed["reason"]
    states = [h["state"] for h in failed["history"]]
    assert states[:4] == ["RECEIVED", "SUBMITTED", "RUNNING", "QUEUED"] and states[-1] == "FAILED"
    assert (
        "attempt 1 of 2 lost its nodes" in err
        and "attempt 2 in " in err
        and "from the run's last checkpoint if it saved one" in err
    )
    # Ray Train's own verdict on the lost worker group is one console line, with its cause (no restart: max_failures 0)
    assert "worker group failure 1 (no restart): " in err and "; giving up" in err, err[-4000:]
    first, second = failed["attempts"]
    assert first["number"] == 1 and first["job"] == run_id and first["outcome"].startswith("lost its nodes")
    assert any("exited with" in line and "ray-worker-" in line for line in first["lost"]), first["lost"]
    assert second["number"] == 2 and second["job"] == f"{run_id}-2"
    assert second["outcome"].startswith("FAILED: attempt 2 of 2 lost its nodes: node ray-worker-"), second["outcome"]
    assert second["submitted_at"] >= first["ended_at"]
    # The second attempt's first step is the checkpoint's next: read from its own driver log.
    assert resumed_at((workdir / "logs" / f"{run_id}-2-driver.log").read_text()) in range(6, 36, 6)

    retried = subprocess.run(
        [RAYTUNE, "retry", run_id, "--workdir", str(workdir)],
        cwd=home,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert retried.returncode == 0, retried.stderr[-4000:] + retried.stdout[-2000:]
    record = json.loads((workdir / "records" / f"{run_id}.json").read_text())
    assert record["state"] == "SUCCEEDED" and [a["number"] for a in record["attempts"]] == [1, 2, 3]
    assert record["attempts"][2]["by"] == "raytune retry" and record["attempts"][2]["job"] == f"{run_id}-3"
    metrics = record["result"]["metrics"]
    assert metrics["resumed"] is True and metrics["global_step"] == 36
    assert metrics["resumed_from_step"] == resumed_at((workdir / "logs" / f"{run_id}-3-driver.log").read_text())
    assert metrics["resumed_from_step"] in range(6, 36, 6)
    # Every checkpoint of the three attempts is one step once: nothing was trained twice past the checkpoint.
    done = [
        json.loads((Path(c) / "trainer_state.json").read_text())["global_step"] for c in record["result"]["checkpoints"]
    ]
    assert done == sorted(set(done)) and done[-1] == 36
