"""The Vertex AI destination's logger, with Vertex AI's own client (google-cloud-aiplatform's `ExperimentRun`):
a run is an experiment run (its config and raytune's tags as parameters, its summary and evaluation as metrics,
its state), its curves the run's time series in the experiment's backing Vertex AI TensorBoard. Imported only by
a run that tracks in Vertex AI (the client takes seconds to import).

The client speaks REST (`api_transport="rest"`) wherever it runs, so what the tests play against a stand-in is
what a run sends to Vertex AI. Credentials are the trainer's own (Workload Identity on GKE, the application
default ones locally): there is no key to keep."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

from functions.core import tracking as spec
from functions.core.config import RunConfig
from functions.core.result import TrackedRun
from trainer.tracking import Delivery, Identity, Logger, flat_config

OPEN_BOUND_S = 60.0  # the most opening the run may take: Vertex AI's client retries a call for minutes
STATES = {"FINISHED": "COMPLETE", "FAILED": "FAILED", "KILLED": "CANCELLED"}
CONSOLE = "https://console.cloud.google.com/vertex-ai/experiments/locations/{location}/experiments/{experiment}"


def settings(cfg: RunConfig, who: Identity) -> dict[str, Any]:
    """aiplatform.init's arguments for this config and run: its project, location and endpoint."""
    assert cfg.tracking is not None and cfg.tracking.vertex is not None
    vertex = cfg.tracking.vertex
    found: dict[str, Any] = {
        "project": vertex.project,
        "location": vertex.location or who.region or "us-central1",
        "api_transport": "rest",
    }
    if vertex.endpoint:
        found["api_endpoint"] = vertex.endpoint
    if spec.vertex_emulated(vertex.endpoint):
        from google.auth.credentials import AnonymousCredentials

        found["credentials"] = AnonymousCredentials()
    return found


class VertexRun(Logger):
    name = "vertex"

    def __init__(self, cfg: RunConfig, who: Identity, with_params: bool) -> None:
        opened: list[Any] = []
        failed: list[BaseException] = []

        def open_() -> None:
            try:
                opened.append(self._open(cfg, who, with_params))
            except BaseException as exc:
                failed.append(exc)

        opener = threading.Thread(target=open_, name="raytune-vertex-open", daemon=True)
        opener.start()
        opener.join(OPEN_BOUND_S)
        if failed:
            raise failed[0]
        if not opened:
            raise TimeoutError(f"Vertex AI did not open the run within {OPEN_BOUND_S:.0f} s")
        self.run = opened[0]
        self.delivery = Delivery(self._send)

    def _open(self, cfg: RunConfig, who: Identity, with_params: bool) -> Any:
        from google.api_core.exceptions import NotFound
        from google.cloud import aiplatform

        # Each of the client's modules tells every step it takes at INFO on its own stdout handler ("Associating ...
        # to Experiment"): a line per call in the run's log, which says what matters once, at the end.
        for name, each in list(logging.Logger.manager.loggerDict.items()):
            if name.startswith("google.cloud.aiplatform") and isinstance(each, logging.Logger):
                each.setLevel(logging.WARNING)
        assert cfg.tracking is not None and cfg.tracking.vertex is not None
        vertex = cfg.tracking.vertex
        init = settings(cfg, who)
        self.experiment, self.location = spec.vertex_experiment(vertex, cfg.name), init["location"]
        self.run_name = spec.vertex_run(who.run_id, who.trial)
        # The experiment made if missing, with its backing TensorBoard (the named one, else the client's default).
        aiplatform.init(experiment=self.experiment, experiment_tensorboard=vertex.tensorboard, **init)
        self.project = aiplatform.initializer.global_config.project
        try:
            run = aiplatform.ExperimentRun(self.run_name, experiment=self.experiment)  # a later attempt's
            if run.get_state() != aiplatform.gapic.Execution.State.RUNNING:
                run.update_state(aiplatform.gapic.Execution.State.RUNNING)
            created = False
        except NotFound:
            run = aiplatform.ExperimentRun.create(
                self.run_name, experiment=self.experiment, tensorboard=vertex.tensorboard
            )
            created = True
        params: dict[str, Any] = dict(who.tags())  # each open: the attempt and region now
        if created and with_params:
            params.update(flat_config(cfg))
        run.log_params(params)
        return run

    def _send(self, points: list[tuple[int, str, float]]) -> None:
        steps: dict[int, dict[str, float]] = defaultdict(dict)
        for step, key, value in points:
            steps[step][key] = value
        for step, metrics in sorted(steps.items()):
            self.run.log_time_series_metrics(metrics, step=step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.delivery.put([(step, key, value) for key, value in metrics.items()])

    def finish(self, summary: dict[str, float], tags: dict[str, str], state: str) -> None:
        from google.cloud import aiplatform

        self.delivery.close()
        if summary:
            self.run.log_metrics(summary)
        if tags:
            self.run.log_params(tags)
        self.run.update_state(getattr(aiplatform.gapic.Execution.State, STATES.get(state, "COMPLETE")))

    @property
    def url(self) -> str:
        where = CONSOLE.format(location=self.location, experiment=self.experiment)
        return f"{where}/runs/{self.experiment}-{self.run_name}?project={self.project}"

    def close(self) -> TrackedRun:
        return self.delivery.tracked(run_id=self.run_name, experiment_id=self.experiment, url=self.url)


def tag_best(cfg: RunConfig, who: Identity, run_name: str) -> None:
    """The best trial's own experiment run, marked so (as MLflow's is tagged)."""
    from google.cloud import aiplatform

    assert cfg.tracking is not None and cfg.tracking.vertex is not None
    aiplatform.init(**settings(cfg, who))
    experiment = spec.vertex_experiment(cfg.tracking.vertex, cfg.name)
    aiplatform.ExperimentRun(run_name, experiment=experiment).log_params({spec.BEST_RUN_TAG: "true"})
