"""Tracking end to end on the embedded local default, read back with each tool's own client: a quickstart tracked
in a real MLflow server (started here, SQLite store), in W&B's offline mode and in a Vertex AI stand-in (its
requests parsed with google-cloud-aiplatform's own types) at once, its TensorBoard files read
by TensorBoard's reader; a server stopped in the middle of a run, which still succeeds and says once what was not
delivered."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests import wandb_log
from tests.e2e.test_local import ROOT, finish, start
from tests.fakes.http import serve_in_thread
from tests.fakes.vertex import FakeVertex
from tests.mlflow_server import start as start_mlflow

pytestmark = pytest.mark.slow


def tracked_quickstart(tmp_path: Path, tracking: dict) -> Path:
    config = yaml.safe_load((ROOT / "examples" / "tracking.yaml").read_text())
    config["tracking"] = tracking
    # One node, batches twice as large: the same 14 steps and curve (the subject is the trackers, not the nodes).
    config["scaling"]["nodes"] = 1
    config["training"]["per_device_batch_size"] *= 2
    path = tmp_path / "tracked.json"
    path.write_text(json.dumps(config))
    return path


def test_a_quickstart_is_one_run_in_mlflow_wandb_and_vertex(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    home, workdir, wandb_dir = tmp_path / "home", tmp_path / "w", tmp_path / "wandb"
    home.mkdir()
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    service, uri = start_mlflow(tmp_path / "mlflow")
    vertex = FakeVertex()
    serve_in_thread(vertex)
    try:
        destinations = {
            "mlflow": {"uri": uri},
            "wandb": {"mode": "offline"},
            "vertex": {"endpoint": vertex.endpoint, "project": "proj-local"},
        }
        config = tracked_quickstart(tmp_path, destinations)
        proc, _ = start(workdir, str(config), "--json", "--keep-warm", "0", home=home)
        out, err = finish(proc)
        record = json.loads(out)
        assert proc.returncode == 0 and record["state"] == "SUCCEEDED", err[-6000:]
        tracked = record["result"]["tracking"]
        client = MlflowClient(uri)
        run = client.get_run(tracked["mlflow"]["run_id"])
        check_mlflow_run(client, run, record)
        assert tracked["mlflow"]["undelivered"] == 0 and tracked["mlflow"]["url"] in err  # its page, in the story
        check_wandb_run(wandb_dir, record)
        check_tensorboard(client, run, record)
        check_vertex_run(vertex, record, err)
    finally:
        service.stop()
        vertex.shutdown()


def check_mlflow_run(client, run, record: dict) -> None:
    assert run.info.status == "FINISHED" and run.info.run_name == record["run_id"]
    tags = run.data.tags
    assert tags["raytune.run_id"] == record["run_id"] and tags["raytune.attempt"] == "1"
    assert tags["raytune.config_name"] == "quickstart" and tags["raytune.kind"] == "run"
    assert tags["raytune.region"] == "us-central1" and len(tags["raytune.code_sha256"]) == 64
    assert tags["raytune.adapter"] == record["result"]["adapter_path"]
    # The config as flat parameters (its tracking section left out: it says where, not what was trained).
    params = run.data.params
    assert params["training.learning_rate"] == "0.0002" and params["model.id"] == "tiny://gemma3"
    assert params["lora.r"] == "16" and not any(key.startswith("tracking.") for key in params)
    # The training curve at every logging step, and the evaluation beside the training metrics.
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert steps == list(range(2, 15, 2)), steps
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval_loss")] == [7, 14]
    evaluation = record["result"]["evaluation"]
    assert run.data.metrics["challenger/eval_loss"] == pytest.approx(evaluation["challenger"]["eval_loss"])
    assert run.data.metrics["summary/global_step"] == 14
    # The summary always, and the adapter too: on a local path, which a registry version could not name.
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"result.json", "adapter"} <= artifacts, artifacts
    assert "adapter_config.json" in {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "adapter")}


def check_vertex_run(vertex: FakeVertex, record: dict, err: str) -> None:
    """The experiment run as Vertex AI holds it: rank 0's params and curve, the driver's end (the evaluation as
    metrics, the adapter as a parameter, the state)."""
    run_id = record["run_id"]
    context = f"projects/proj-local/locations/us-central1/metadataStores/default/contexts/quickstart-{run_id}"
    metadata = vertex.resources[context]["metadata"]
    params, metrics = metadata["_params"], metadata["_metrics"]
    assert metadata["_state"] == "COMPLETE" and params["raytune.run_id"] == run_id
    assert (
        params["training.learning_rate"] == "0.0002" and params["raytune.adapter"] == record["result"]["adapter_path"]
    )
    evaluation = record["result"]["evaluation"]
    assert metrics["challenger/eval_loss"] == pytest.approx(evaluation["challenger"]["eval_loss"])
    [board_run] = [n for n in vertex.resources if n.endswith(f"/experiments/quickstart/runs/{run_id}")]
    assert [step for step, _ in vertex.curve(board_run, "loss")] == list(range(2, 15, 2))
    tracked = record["result"]["tracking"]["vertex"]
    assert tracked["undelivered"] == 0 and tracked["url"] in err and not vertex.refused, vertex.refused


def check_wandb_run(wandb_dir: Path, record: dict) -> None:
    # One W&B run, resumed by id: rank 0's part (config, curve), then the driver's end (summary), each an offline
    # folder of its own, as W&B writes a resumed run offline; `wandb sync` puts them together under the one id.
    files = sorted(wandb_dir.glob(f"wandb/offline-run-*-{record['run_id']}/run-{record['run_id']}.wandb"))
    assert len(files) == 2, files
    rows = [row for run_file in files for row in wandb_log.history(run_file)]
    steps = [row["train/global_step"] for row in rows if "loss" in row]
    assert steps == list(range(2, 15, 2)), rows
    config = wandb_log.config(files[0])
    assert config["training.learning_rate"] == "0.0002" and config["model.id"] == "tiny://gemma3"
    summary = {key: value for run_file in files for key, value in wandb_log.summary(run_file).items()}
    assert summary["raytune/raytune.run_id"] == record["run_id"]
    assert summary["raytune.adapter"] == record["result"]["adapter_path"]
    assert summary["challenger/eval_loss"] == pytest.approx(record["result"]["evaluation"]["challenger"]["eval_loss"])


def check_tensorboard(client, run, record: dict) -> None:
    """The TensorBoard files beside the adapter, read with TensorBoard's own reader: the same curve MLflow got."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(record["result"]["tensorboard_path"])
    events.Reload()
    curve = [(e.step, e.value) for e in events.Scalars("train/loss")]
    tracked = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")]
    assert [step for step, _ in curve] == [step for step, _ in tracked] == list(range(2, 15, 2))
    assert [v for _, v in curve] == pytest.approx([v for _, v in tracked], rel=1e-5)


def test_a_tracking_server_stopped_mid_run_never_fails_it(tmp_path):
    """Stopped once the run is tracked: the run succeeds, its record is whole, and the story says once what the
    server did not get."""
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    service, uri = start_mlflow(tmp_path / "mlflow")
    config = tracked_quickstart(tmp_path, {"mlflow": {"uri": uri}})
    proc, _ = start(workdir, str(config), "--json", "--keep-warm", "0", home=home)
    try:
        wait_for_tracked_run(uri, proc)
        service.stop()
        out, err = finish(proc)
    finally:
        service.stop()
    record = json.loads(out)
    assert proc.returncode == 0 and record["state"] == "SUCCEEDED", err[-6000:]
    assert record["result"]["adapter_path"] and record["result"]["evaluation"], "the record is the source of truth"
    tracked = record["result"]["tracking"]["mlflow"]
    assert tracked["undelivered"] > 0 and tracked["error"], tracked
    said = f"mlflow: {tracked['undelivered']} of {tracked['points']} metric points were not delivered"
    assert err.count(said) == 1, err[-4000:]


def wait_for_tracked_run(uri: str, proc, timeout_s: float = 300) -> None:
    """Until the run's first worker has opened its tracked run on the server."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "raytune local ended before its run was tracked"
        experiment = client.get_experiment_by_name("quickstart")
        if experiment is not None and client.search_runs([experiment.experiment_id]):
            return
        time.sleep(0.2)
    raise AssertionError("the run was never tracked")
