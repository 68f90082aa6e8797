"""A sweep end to end on the embedded local default: Ray Tune's trials on the run's worker group, ASHA stopping
the poor ones, the best trial's adapter the run's; and a sweep that loses its node resumes the interrupted trial
from its checkpoint without training a finished trial again."""

from __future__ import annotations

import itertools
import json
import re
import signal
from pathlib import Path

import pytest

from functions.core.story import QUIET_S
from tests.e2e.test_local import ROOT, finish, start
from tests.e2e.test_lost_nodes import registered_checkpoints, wait_until, worker_raylet
from tests.harness import tiny_checkpointed
from tests.mlflow_server import start as start_mlflow

pytestmark = pytest.mark.slow


def test_a_local_sweep_stops_poor_trials_early_and_keeps_the_best_trials_adapter(tmp_path):
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    # Tracked in a real MLflow server: a parent run with a child per trial (tracked_sweep below).
    service, uri = start_mlflow(tmp_path / "mlflow")
    try:
        config = json.loads((ROOT / "examples" / "quickstart-sweep.json").read_text())
        (tmp_path / "sweep.json").write_text(json.dumps({**config, "tracking": {"mlflow": {"uri": uri}}}))
        proc, _ = start(workdir, str(tmp_path / "sweep.json"), "--json", home=home)
        out, err = finish(proc)
        record = json.loads(out)
        assert proc.returncode == 0 and record["state"] == "SUCCEEDED", err[-6000:]
        tracked_sweep(uri, record)
    finally:
        service.stop()
    assert proc.returncode == 0 and record["state"] == "SUCCEEDED", err[-6000:]
    # The run holds a node for each trial at once (scaling.nodes 1 x sweep.concurrent 2), and releases them.
    assert "worker group: 2 nodes" in err and "worker group: 0 nodes" in err
    result, sweep = record["result"], record["result"]["sweep"]
    trials = sweep["trials"]
    assert len(trials) == 4 and len({json.dumps(t["params"]) for t in trials}) == 4
    assert (sweep["metric"], sweep["mode"], sweep["stopped_on"]) == ("eval_loss", "min", "eval_loss")
    stopped = [t for t in trials if t["state"] == "stopped"]
    done = [t for t in trials if t["state"] == "finished"]
    assert stopped, "ASHA stopped no trial early"
    assert len(stopped) + len(done) == 4, [t["state"] for t in trials]
    for trial in stopped:  # stopped at an evaluation before the last step (28), with no adapter, and said so
        assert trial["adapter_path"] is None and trial["stopped_at_step"] < 28
        said = re.search(
            rf"{trial['trial_id']} stopped early at step (\d+) \(ASHA: eval_loss [0-9.]+, not in the best 1/2", err
        )
        assert said, err[-4000:]
        assert trial["history"][-1]["step"] == trial["stopped_at_step"]
    # The best is the finished trial with the lowest final eval loss, and its adapter is the run's.
    best = min(done, key=lambda t: t["metric"])
    assert sweep["best_trial"] == best["trial_id"] and result["adapter_path"] == best["adapter_path"]
    assert f"/trials/{best['trial_id']}/" in result["adapter_path"]
    assert Path(result["adapter_path"], "adapter_config.json").exists()
    for trial in done:
        assert trial["metric"] == trial["history"][-1]["eval_loss"] and trial["history"][-1]["step"] == 28
        own = json.loads(
            Path(workdir, "checkpoints", record["run_id"], "trials", trial["trial_id"], "result.json").read_text()
        )
        assert own["adapter_path"] == trial["adapter_path"] and own["metrics"]["global_step"] == 28
    # The best trial's own checkpoints are the run's (pruned by training.keep_checkpoints as any run's)
    assert result["best_checkpoint"].startswith(str(Path(result["adapter_path"]).parents[1]))
    # Two at once: the trials' draws were run two by two (never more than two trial drivers at a time).
    starts = [line for line in err.splitlines() if re.search(r"trial-00\d · step 2/", line)]
    assert len(starts) == 4, starts
    # The sweep's report.html in the run's folder: every trial, and a link to the best one's evaluation report.
    page = Path(sweep["report_path"])
    assert page == Path(workdir, "checkpoints", record["run_id"], "report.html") and page.exists()
    assert all(t["trial_id"] in page.read_text() for t in trials) and f"sweep report     {page}" in err
    # The console's summary has the trials' table; each trial's progress lines name it.
    assert f"best {best['trial_id']} by eval_loss (min)" in err and " *  finished" in err
    # Each trial's start is told, and each of its phases names it (two trials' phases interleave).
    for trial in trials:
        assert f"  {trial['trial_id']} · starting 1 workers..." in err, err[-6000:]
        assert re.search(rf"  {trial['trial_id']} · importing torch, transformers, trl and peft: \d", err)
    unnamed = [line for line in err.splitlines() if re.search(r"\]   (starting|importing|loading|preparing)", line)]
    assert not unnamed, unnamed
    # Never much more than QUIET_S without a line while the sweep runs (a quiet stretch says what is under way;
    # a look of the follower's is one tick, which a loaded machine may stretch by some seconds).
    running = err[err.index(": RUNNING") :]
    stamps = [float(t) for t in re.findall(r"^\[\s*([0-9.]+)s\]", running, re.MULTILINE)]
    assert max(b - a for a, b in itertools.pairwise(stamps)) < QUIET_S + 10, running[-6000:]


def tracked_sweep(uri: str, record: dict) -> None:
    """The sweep as MLflow's client reads it: one parent naming the best trial, one child per trial with its
    drawn values, its curve and how it ended (a trial ASHA stopped: KILLED, said so)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("quickstart-sweep")
    runs = client.search_runs([experiment.experiment_id])
    [parent] = [r for r in runs if r.data.tags["raytune.kind"] == "sweep"]
    children = {r.data.tags["raytune.trial"]: r for r in runs if r.data.tags["raytune.kind"] == "trial"}
    sweep = record["result"]["sweep"]
    assert parent.info.run_id == record["result"]["tracking"]["mlflow"]["run_id"]
    assert parent.info.status == "FINISHED" and parent.data.tags["raytune.best_trial"] == sweep["best_trial"]
    assert set(children) == {t["trial_id"] for t in sweep["trials"]}
    for trial in sweep["trials"]:
        child = children[trial["trial_id"]]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert float(child.data.params["training.learning_rate"]) == pytest.approx(
            trial["params"]["training.learning_rate"]
        )
        evaluated = [m.step for m in client.get_metric_history(child.info.run_id, "eval_loss")]
        assert evaluated == [int(h["step"]) for h in trial["history"]], (evaluated, trial["history"])
        if trial["state"] == "stopped":
            assert child.info.status == "KILLED" and child.data.tags["raytune.trial_state"] == "stopped"
        else:
            assert child.info.status == "FINISHED"
    assert children[sweep["best_trial"]].data.tags["raytune.best"] == "true"


CONFIG = tiny_checkpointed(
    "sweep-preempted",
    samples=40,
    eval_fraction=0.2,
    max_steps=40,  # long enough that the node is lost mid-training, past the first checkpoint
    # The lost node fails the trial, and Tune starts it again (max_attempts 2 in all).
    scaling={"max_attempts": 2},
    cluster={"dependencies": "image"},
    sweep={
        "space": {"lora.r": {"kind": "choice", "values": [4, 8, 16]}},
        "trials": 3,
        "concurrent": 1,
        "scheduler": "none",
        "seed": 1,
    },
)


def test_a_sweep_that_loses_its_node_resumes_without_training_a_finished_trial_again(tmp_path):
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    config = tmp_path / "sweep-preempted.json"
    config.write_text(json.dumps(CONFIG))
    proc, _ = start(workdir, str(config), "--json", home=home)
    trials_dirs = lambda: list((workdir / "checkpoints").glob("*/trials/*"))  # noqa: E731
    results = lambda: [d / "result.json" for d in trials_dirs() if (d / "result.json").exists()]  # noqa: E731

    def second_trial_checkpointed() -> bool:
        snapshots = [d / "checkpoint_manager_snapshot.json" for d in trials_dirs() if not (d / "result.json").exists()]
        return len(results()) == 1 and any(registered_checkpoints(s) >= 1 for s in snapshots)

    wait_until(proc, "one finished trial and a checkpoint of the next", second_trial_checkpointed)
    [first_result] = results()
    first_trial, first_written = first_result.parent.name, first_result.stat().st_mtime_ns
    worker_raylet(workdir).send_signal(signal.SIGKILL)
    out, err = finish(proc)
    record = json.loads(out)
    assert proc.returncode == 0 and record["state"] == "SUCCEEDED", err[-6000:]
    # Ray Train gives the trial up (no restart: max_failures 0); Tune starts it again in the same job, on the
    # group's node the controller brought back, and the sweep goes on: one attempt of the run.
    assert "worker group failure 1 (no restart): " in err and not record["attempts"], err[-4000:]
    log = (workdir / "logs" / f"{record['run_id']}-driver.log").read_text(errors="replace")
    # The finished trial is neither trained nor written again; the interrupted one resumes from its checkpoint.
    assert log.count(f"{first_trial}: lora.r=") == 1 and first_result.stat().st_mtime_ns == first_written
    resumed = re.findall(r"resuming from \S+/trials/([\w-]+)/\S+ at step (\d+)", log)
    assert resumed and resumed[0][0] != first_trial and int(resumed[0][1]) in range(4, 40, 4), resumed
    trials = record["result"]["sweep"]["trials"]
    assert [t["state"] for t in trials] == ["finished"] * 3 and [t["trial_id"] for t in trials] == [
        "trial-000",
        "trial-001",
        "trial-002",
    ]
    interrupted = next(t for t in trials if t["trial_id"] == resumed[0][0])
    own = Path(workdir, "checkpoints", record["run_id"], "trials", interrupted["trial_id"], "result.json")
    metrics = json.loads(own.read_text())["metrics"]
    assert metrics["resumed"] is True and metrics["resumed_from_step"] == int(resumed[0][1])
    assert metrics["global_step"] == 40
