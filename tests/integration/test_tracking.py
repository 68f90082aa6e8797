"""The trackers' contracts against a real MLflow server (the `mlflow` package's own, SQLite store), read back with
MlflowClient: a later attempt continues the same tracked run at its step; a server that answers 500 or is slow
never fails or holds a run, and what it missed is counted; the champion alias moves once per promotion, moves
back when the pointer does, and is repaired after a lost move."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from functions.adapters import registry
from functions.core.config import RunConfig
from functions.core.result import RunResult
from tests.mlflow_server import mlflow_server
from trainer import trackers, tracking


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory) -> Iterator[str]:
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


def tracked(uri: str, name: str = "tracked") -> RunConfig:
    return RunConfig.model_validate({"name": name, "tracking": {"mlflow": {"uri": uri}}})


def test_a_later_attempt_continues_the_same_tracked_run_at_its_step(mlflow_uri):
    from mlflow.tracking import MlflowClient

    cfg = tracked(mlflow_uri, "attempts")
    first = tracking.identity(cfg, "attempts-0123456789", attempt=1)
    [logger] = trackers.open_loggers(cfg, first)
    for step in (2, 4, 6):
        logger.log(step, {"loss": 1.0 / step})
    worker = {"mlflow": logger.close()}
    # The first attempt's nodes are lost: its driver ends the tracked run FAILED.
    trackers.ended(cfg, first, None, "FAILED", worker)
    client = MlflowClient(mlflow_uri)
    run_id = worker["mlflow"].run_id
    assert client.get_run(run_id).info.status == "FAILED"

    second = tracking.identity(cfg, "attempts-0123456789", attempt=2)
    [logger] = trackers.open_loggers(cfg, second)
    for step in (4, 6, 8):  # resumed from its checkpoint at step 4
        logger.log(step, {"loss": 0.5 / step})
    again = logger.close()
    assert again.run_id == run_id, "one tracked run whatever its attempts"
    run = client.get_run(run_id)
    assert run.info.status == "RUNNING" and run.data.tags["raytune.attempt"] == "2"
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [2, 4, 6, 4, 6, 8]  # as logged
    ended = trackers.ended(cfg, second, RunResult(run_id="attempts-0123456789"), "FINISHED", {"mlflow": again})
    assert client.get_run(run_id).info.status == "FINISHED" and ended["mlflow"].undelivered == 0


class Answers500(http.server.BaseHTTPRequestHandler):
    delay_s = 0.0

    def _answer(self) -> None:
        time.sleep(self.delay_s)
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error_code": "INTERNAL_ERROR", "message": "the tracker is down"}')

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def broken_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_tracker_answering_500_never_fails_a_run_and_counts_what_it_lost(broken_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    cfg = tracked(broken_server)
    who = tracking.identity(cfg, "down-0123456789", attempt=1)
    [logger] = trackers.open_loggers(cfg, who)
    assert logger.name == "mlflow"
    for step in range(1, 11):
        logger.log(step, {"loss": 1.0, "learning_rate": 0.1})
    worker = {"mlflow": logger.close()}
    assert worker["mlflow"].run_id is None and worker["mlflow"].undelivered == worker["mlflow"].points == 20
    assert "500" in (worker["mlflow"].error or "")
    ended = trackers.ended(
        cfg, who, RunResult(run_id="down-0123456789", metrics={"global_step": 10}), "FINISHED", worker
    )
    assert ended["mlflow"].undelivered == ended["mlflow"].points > 20


def test_a_slow_tracker_never_holds_a_step_and_the_end_waits_at_most_its_bound():
    sent: list[int] = []

    def slow(points: list) -> None:
        time.sleep(2)
        sent.append(len(points))

    delivery = tracking.Delivery(slow, backoff_s=0.01)
    started = time.monotonic()
    for step in range(100):
        delivery.put([("loss", step)])
    assert time.monotonic() - started < 0.5, "a step only queues its points"
    points, lost, error = delivery.close(bound_s=1.0)
    assert time.monotonic() - started < 2.0 and points == 100
    assert lost == 100 - sum(sent) and lost > 0 and "not sent within 1 s" in (error or "")


def test_the_champion_alias_moves_once_and_follows_the_pointer_back(mlflow_uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri, registry_uri=mlflow_uri)
    model, experiment = "line-products", "line-products"
    exp_id = client.create_experiment(experiment)
    for night in ("night-1", "night-2"):
        client.create_run(exp_id, tags={"raytune.run_id": night, "raytune.kind": "run"})
    first = registry.move_champion(mlflow_uri, model, experiment, "night-1", "gs://runs/checkpoints/night-1/adapter")
    assert registry.move_champion(mlflow_uri, model, experiment, "night-1", "gs://runs/x") == first, "once"
    second = registry.move_champion(mlflow_uri, model, experiment, "night-2", "gs://runs/checkpoints/night-2/adapter")
    assert registry.champion_version(mlflow_uri, model) == second != first
    versions = client.search_model_versions(f"name = '{model}'")
    assert len(versions) == 2 and {v.source for v in versions} == {
        "gs://runs/checkpoints/night-1/adapter",
        "gs://runs/checkpoints/night-2/adapter",
    }
    # The champion rolled back to night 1 (its pointer moved back): the alias follows, no new version.
    assert registry.move_champion(mlflow_uri, model, experiment, "night-1", "gs://runs/x") == first
    assert registry.champion_version(mlflow_uri, model) == first
    assert len(client.search_model_versions(f"name = '{model}'")) == 2
    linked = client.get_model_version(model, first)
    assert linked.run_id == client.search_runs([exp_id], "tags.`raytune.run_id` = 'night-1'")[0].info.run_id
