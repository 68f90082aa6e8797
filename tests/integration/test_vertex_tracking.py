"""The Vertex AI destination through google-cloud-aiplatform's own client, against a Vertex AI stand-in that
parses every request with the library's own request types (tests/fakes/vertex.py), read back with the same
client (`ExperimentRun.get_params`, `get_metrics`, `get_state`) and the stand-in's TensorBoard data: a run and
its curve, a later attempt that continues it, a sweep's best trial, and a Vertex AI that is down or fails."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from functions.adapters import vertex_registry
from functions.core.config import RunConfig
from functions.core.result import RunResult
from functions.handlers.lineage import Aliased
from tests.fakes.http import serve_in_thread
from tests.fakes.vertex import FakeVertex
from trainer import trackers, tracking, vertex_run

RUN = "vertexed-0123456789"


@pytest.fixture
def vertex() -> Iterator[FakeVertex]:
    fake = FakeVertex()
    serve_in_thread(fake)
    yield fake
    fake.shutdown()
    # Vertex AI's client keeps the experiment and its TensorBoard for the process (a run's process tracks one
    # config); each test is a Vertex AI of its own.
    from google.cloud.aiplatform.metadata import metadata

    metadata._experiment_tracker.reset()
    metadata._experiment_tracker._global_tensorboard = None


def tracked(endpoint: str, **section) -> RunConfig:
    vertex = {"endpoint": endpoint, "project": "proj-a", "location": "europe-west4", **section}
    return RunConfig.model_validate({"name": "products-v2", "tracking": {"vertex": vertex}})


def read(name: str, experiment: str = "products-v2"):
    """The experiment run as Vertex AI's client reads it."""
    from google.cloud import aiplatform

    return aiplatform.ExperimentRun(name, experiment=experiment)


def test_a_run_its_curve_and_a_later_attempt_are_one_experiment_run(vertex):
    cfg = tracked(vertex.endpoint)
    first = tracking.identity(cfg, RUN, attempt=1)
    [logger] = trackers.open_loggers(cfg, first)
    assert logger.name == "vertex", getattr(logger, "error", None)
    for step in (2, 4, 6):
        logger.log(step, {"train/loss": 1.0 / step, "train/learning_rate": 0.1})
    worker = {"vertex": logger.close()}
    trackers.ended(cfg, first, None, "FAILED", worker)  # its nodes were lost
    assert str(read(RUN).get_state()).endswith("FAILED")

    second = tracking.identity(cfg, RUN, attempt=2)
    [logger] = trackers.open_loggers(cfg, second)
    for step in (4, 6, 8):  # resumed from its checkpoint at step 4
        logger.log(step, {"train/loss": 0.5 / step})
    again = logger.close()
    assert again.run_id == worker["vertex"].run_id == RUN.lower(), "one experiment run whatever its attempts"
    result = RunResult(run_id=RUN, adapter_path="gs://runs/checkpoints/x/adapter", metrics={"global_step": 8})
    ended = trackers.ended(cfg, second, result, "FINISHED", {"vertex": again})

    run = read(RUN)
    params, metrics = run.get_params(), run.get_metrics()
    assert str(run.get_state()).endswith("COMPLETE") and ended["vertex"].undelivered == 0
    assert params["raytune.run_id"] == RUN and params["raytune.attempt"] == "2" and params["raytune.kind"] == "run"
    assert params["training.learning_rate"] == str(cfg.training.learning_rate), "the config as flat parameters"
    assert params["raytune.adapter"] == "gs://runs/checkpoints/x/adapter" and metrics["summary/global_step"] == 8
    tensorboard_runs = [n for n in vertex.resources if n.endswith(f"/runs/{RUN.lower()}")]
    assert len(tensorboard_runs) == 1 and "/tensorboards/" in tensorboard_runs[0]
    assert vertex.curve(tensorboard_runs[0], "train/loss") == [
        (2, 0.5),
        (4, 0.25),
        (6, 1 / 6),
        (4, 0.125),
        (6, 0.5 / 6),
        (8, 0.0625),
    ]
    assert (
        vertex.resources["projects/proj-a/locations/europe-west4/metadataStores/default/contexts/products-v2"][
            "schemaTitle"
        ]
        == "system.Experiment"
    )
    assert ended["vertex"].url.startswith(
        "https://console.cloud.google.com/vertex-ai/experiments/locations/europe-west4/experiments/products-v2/"
    )
    assert not vertex.refused, vertex.refused


def test_a_named_tensorboard_backs_the_experiment(vertex):
    board = "projects/proj-a/locations/europe-west4/tensorboards/77"
    vertex.resources[board] = {"name": board, "displayName": "team board"}
    cfg = tracked(vertex.endpoint, tensorboard=board)
    [logger] = trackers.open_loggers(cfg, tracking.identity(cfg, RUN))
    logger.log(1, {"train/loss": 2.0})
    logger.close()
    assert vertex.curve(f"{board}/experiments/products-v2/runs/{RUN.lower()}", "train/loss") == [(1, 2.0)]
    made = [n for n in vertex.resources if n.endswith("tensorboards/1000") or "/tensorboards/" in n]
    assert all(n.startswith(board) for n in made), "no default TensorBoard made beside the named one"


def test_a_sweeps_trials_are_runs_of_the_experiment_and_the_best_is_marked(vertex):
    cfg = tracked(vertex.endpoint)
    sweep = trackers.open_parent(cfg, RUN)
    closed = {}
    for trial in ("t0", "t1"):
        [logger] = trackers.open_loggers(cfg, tracking.of_trial(sweep, trial))
        logger.log(1, {"train/loss": 1.0})
        closed[trial] = logger.close()
    trackers.mark_best(cfg, {"vertex": closed["t1"]}, sweep)
    assert read(f"{RUN.lower()}-t1").get_params()["raytune.best"] == "true"
    assert read(f"{RUN.lower()}-t0").get_params()["raytune.kind"] == "trial"
    assert not vertex.refused, vertex.refused


def test_vertex_down_never_fails_or_holds_a_run(vertex, monkeypatch):
    """Down when the run opens: not tracked, within the bound; failing later: its points counted, the run on."""
    monkeypatch.setattr(vertex_run, "OPEN_BOUND_S", 3.0)
    cfg = tracked(vertex.endpoint)
    vertex.failing = 10_000
    started = time.monotonic()
    [logger] = trackers.open_loggers(cfg, tracking.identity(cfg, RUN))
    assert time.monotonic() - started < 10
    assert isinstance(logger, trackers.Unreachable) and logger.name == "vertex"
    vertex.failing = 0
    [logger] = trackers.open_loggers(cfg, tracking.identity(cfg, RUN))
    assert logger.name == "vertex" and not isinstance(logger, trackers.Unreachable)
    vertex.failing = 10_000
    logger.delivery.backoff_s = 0.01
    for step in range(1, 6):
        logger.log(step, {"train/loss": 1.0})
    closed = logger.close()
    assert closed.points == 5 and closed.undelivered == 5 and "503" in (closed.error or "")


IMAGE = "us-docker.pkg.dev/vertex-ai/vertex-vision-model-garden-dockers/pytorch-vllm-serve:20251205_0916_RC00"


def nightly(endpoint: str) -> RunConfig:
    vertex = {"endpoint": endpoint, "project": "proj-a", "location": "europe-west4", "serving_image": IMAGE}
    return RunConfig.model_validate({"name": "nightly-products", "tracking": {"vertex": vertex}})


def night(n: int) -> RunResult:
    return RunResult(
        run_id=f"nightly-2026120{n}",
        adapter_path=f"gs://runs/checkpoints/nightly-2026120{n}/adapter",
        merged_path=f"gs://runs/checkpoints/nightly-2026120{n}/merged",
    )


def test_the_champion_alias_follows_the_line_in_the_vertex_model_registry(vertex):
    """Promotions register each champion once, as a version of the line's model with its merged model and the
    serving image; the alias moves to it, and back on a rollback, read with Vertex AI's own client."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    cfg = nightly(vertex.endpoint)
    said = [
        Aliased(cfg, night(n), None).move(f"nightly-2026120{n}", night(n).adapter_path, night(n)) for n in (1, 3, 1)
    ]
    assert [error for _, error in said] == [None] * 3, said
    assert [s for s, _ in said] == [f"vertex model nightly-products version {v}" for v in ("1", "2", "1")]
    [model] = vertex.models
    versions = vertex.models[model]
    assert [v["artifactUri"] for v in versions] == [night(1).merged_path, night(3).merged_path], "registered once"
    assert {v["containerSpec"]["imageUri"] for v in versions} == {IMAGE}
    assert vertex.aliased(model, "default") == "1" and vertex.aliased(model, "champion") == "1"
    client = aiplatform_v1.ModelServiceClient(
        client_options=ClientOptions(api_endpoint=vertex.endpoint),
        transport="rest",
        credentials=AnonymousCredentials(),
    )
    champion = client.get_model(name=f"{model}@champion")
    assert champion.version_id == "1" and champion.labels["raytune_run_id"] == "nightly-20261201"
    assert (
        vertex_registry.champion_version(
            vertex_registry.Place("proj-a", "europe-west4", vertex.endpoint), "nightly-products"
        )
        == "1"
    )
    assert not vertex.refused, vertex.refused


def test_a_champion_vertex_ai_cannot_name_is_said_not_raised(vertex):
    cfg = nightly(vertex.endpoint)
    local = RunResult(run_id="nightly-20261201", adapter_path="/home/me/.raytune/local/checkpoints/a/adapter")
    said, error = Aliased(cfg, local, None).move("nightly-20261201", local.adapter_path, local)
    assert said is None and "vertex: " in error and "gs://" in error and not vertex.models
    vertex.failing = 10_000
    said, error = Aliased(cfg, night(1), None).move("nightly-20261201", None, night(1))
    assert said is None and "503" in error
