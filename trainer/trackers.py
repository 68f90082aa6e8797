"""Each tracking destination's logger, with its tool's own client (trainer/tracking.py is the interface): MLflow's
MlflowClient and W&B's wandb.init. Imported only by a run that tracks."""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from functions.core import tracking as spec
from functions.core.config import RunConfig
from functions.core.errors import describe
from functions.core.result import RunResult, TrackedRun
from functions.core.secrets import redact
from trainer.tracking import (
    MLFLOW_CLIENT_ENV,
    Delivery,
    Identity,
    Logger,
    flat_config,
    identity,
    numbers,
    of_trial,
)

log = logging.getLogger("raytune.tracking")
MAX_PARAMS = 100  # MLflow's log_batch takes at most 100 params a call
MAX_PARAM_VALUE = 6000  # MLflow 3's longest param value


class Unreachable(Logger):
    """A destination that could not be opened: the run goes on; what it would have logged is counted lost."""

    def __init__(self, name: str, error: BaseException) -> None:
        self.name, self.error, self.points = name, redact(describe(error, 300)), 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.points += len(metrics)

    def finish(self, summary: dict[str, float], tags: dict[str, str], state: str) -> None:
        self.points += len(summary)

    def close(self) -> TrackedRun:
        return TrackedRun(points=self.points, undelivered=self.points, error=self.error or "not opened")


def opened(name: str, cfg: RunConfig, who: Identity, with_params: bool) -> Logger:
    try:
        if name == "vertex":  # its client takes seconds to import: only where a run tracks there
            from trainer.vertex_run import VertexRun

            return VertexRun(cfg, who, with_params)
        openers: dict[str, type[Logger]] = {"mlflow": MlflowRun, "wandb": WandbRun}
        return openers[name](cfg, who, with_params)  # type: ignore[call-arg]
    except Exception as exc:
        return Unreachable(name, exc)


def parents(cfg: RunConfig, sweep: Identity) -> dict[str, str]:
    """A sweep's parent run in each destination that nests runs (MLflow); W&B groups a sweep's trials by the
    run id instead."""
    found = {}
    if cfg.tracking and cfg.tracking.mlflow:
        parent = opened("mlflow", cfg, sweep, with_params=True)
        if isinstance(parent, MlflowRun):
            parent.close()
            found["mlflow"] = parent.run_id
    return found


class MlflowRun(Logger):
    name = "mlflow"

    def __init__(self, cfg: RunConfig, who: Identity, with_params: bool) -> None:
        for key, value in MLFLOW_CLIENT_ENV.items():
            os.environ.setdefault(key, value)
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        self.metric = Metric  # imported here, not at a step's first log
        assert cfg.tracking is not None and cfg.tracking.mlflow is not None
        self.uri = who.uris.get("mlflow")
        if not self.uri:
            raise ValueError("no tracking server: set tracking.mlflow.uri (or MLFLOW_TRACKING_URI)")
        self.client = MlflowClient(self.uri)
        self.experiment_id = self._experiment(spec.experiment_name(cfg.tracking, cfg.name))
        self.run_id, created = self._run(who)
        params = flat_config(cfg) if created and with_params else {}
        tags = [RunTag(key, value) for key, value in who.tags().items()]
        items = [Param(key, value[:MAX_PARAM_VALUE]) for key, value in sorted(params.items())]
        for start in range(0, max(len(items), 1), MAX_PARAMS):
            self.client.log_batch(self.run_id, params=items[start : start + MAX_PARAMS], tags=tags if not start else [])
        self.delivery = Delivery(self._send)

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except Exception:  # made meanwhile by another trial's rank 0
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _run(self, who: Identity) -> tuple[str, bool]:
        """The raytune run's tracked run: found by its tags (a later attempt, a restarted worker), else made."""
        query = f"tags.`{spec.RUN_ID_TAG}` = '{who.run_id}' and tags.`{spec.KIND_TAG}` = '{who.kind}'"
        if who.trial:
            query += f" and tags.`{spec.TRIAL_TAG}` = '{who.trial}'"
        found = self.client.search_runs([self.experiment_id], query, max_results=1)
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != "RUNNING":
                self.client.update_run(run_id, status="RUNNING")
            return run_id, False
        tags = who.tags()
        if parent := who.parents.get(self.name):
            tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=who.trial or who.run_id, tags=tags)
        return run.info.run_id, True

    def _send(self, points: list[Any]) -> None:
        self.client.log_batch(self.run_id, metrics=points)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        stamp = int(time.time() * 1000)
        self.delivery.put([self.metric(key, value, stamp, step) for key, value in metrics.items()])

    def finish(self, summary: dict[str, float], tags: dict[str, str], state: str) -> None:
        from mlflow.entities import RunTag

        self.log(int(summary.get("global_step", 0)), summary)
        self.delivery.close()
        self.client.log_batch(self.run_id, tags=[RunTag(key, value) for key, value in tags.items()])
        self.client.set_terminated(self.run_id, state)

    def copy_artifacts(self, folder: str, path: str) -> None:
        self.client.log_artifacts(self.run_id, folder, path)

    @property
    def url(self) -> str | None:
        if self.uri and self.uri.startswith(("http://", "https://")):
            return f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return None

    def close(self) -> TrackedRun:
        return self.delivery.tracked(run_id=self.run_id, experiment_id=self.experiment_id, url=self.url, uri=self.uri)


def open_loggers(cfg: RunConfig, who: Identity, with_params: bool = True) -> list[Logger]:
    """A logger for each destination the config names (none without `tracking:`), each opened on its run."""
    if cfg.tracking is None:
        return []
    return [opened(name, cfg, who, with_params) for name in cfg.tracking.destinations]


def open_parent(cfg: RunConfig, run_id: str) -> Identity:
    """A sweep's driver: its parent run in each destination, before the trials (theirs are its children)."""
    sweep = identity(cfg, run_id, kind="sweep")
    if cfg.tracking is not None:
        sweep.parents = parents(cfg, sweep)
    return sweep


def mark_best(cfg: RunConfig, best: dict[str, TrackedRun], sweep: Identity) -> None:
    """The best trial's own run, tagged so (best-effort: the parent names it too)."""
    vertex = best.get("vertex")
    if cfg.tracking is not None and cfg.tracking.vertex is not None and vertex is not None and vertex.run_id:
        try:
            from trainer.vertex_run import tag_best

            tag_best(cfg, sweep, vertex.run_id)
        except Exception as exc:
            log.warning("vertex: the best trial's run not marked: %s", redact(describe(exc, 300)))
    run = best.get("mlflow")
    if cfg.tracking is None or cfg.tracking.mlflow is None or run is None or run.run_id is None or not run.uri:
        return
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient(run.uri).set_tag(run.run_id, spec.BEST_RUN_TAG, "true")
    except Exception as exc:  # the parent's raytune.best_trial tag says it as well
        log.warning("mlflow: the best trial's run not tagged: %s", redact(describe(exc, 300)))


def wandb_id(who: Identity) -> str:
    """W&B's run id: the raytune run's (and trial's), in the characters W&B allows, at most 64."""
    key = f"{who.run_id}-{who.trial}" if who.trial else who.run_id
    return re.sub(r"[^A-Za-z0-9_-]", "-", key)[:64]


class WandbRun(Logger):
    name = "wandb"

    def __init__(self, cfg: RunConfig, who: Identity, with_params: bool) -> None:
        import wandb

        assert cfg.tracking is not None and cfg.tracking.wandb is not None
        settings = cfg.tracking.wandb
        self.points = 0
        self.run = wandb.init(
            project=settings.project or cfg.name,
            entity=settings.entity,
            id=wandb_id(who),
            name=wandb_id(who),
            group=who.run_id if who.kind != "run" else None,  # a sweep's parent and its trials
            job_type=who.kind,
            resume="allow",
            mode=settings.mode,
            dir=os.environ.get("WANDB_DIR"),
            config=flat_config(cfg) if with_params else None,
            tags=[f"attempt-{who.attempt}", *([who.region] if who.region else [])],
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )
        # A later attempt goes back to its checkpoint's step: W&B drops a step lower than its last, so the
        # Trainer's step is a metric of its own that the others are plotted against (as Transformers' callback).
        self.run.define_metric("train/global_step")
        self.run.define_metric("*", step_metric="train/global_step", step_sync=True)
        self.run.summary.update({f"raytune/{k}": v for k, v in who.tags().items()})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.points += len(metrics)
        self.run.log({**metrics, "train/global_step": step})

    def finish(self, summary: dict[str, float], tags: dict[str, str], state: str) -> None:
        self.points += len(summary)
        self.run.summary.update({**summary, **tags, "raytune/state": state})

    def close(self) -> TrackedRun:
        error = None
        try:
            self.run.finish(exit_code=0)
        except Exception as exc:
            error = redact(describe(exc, 300))
        url = getattr(self.run, "url", None)
        return TrackedRun(run_id=self.run.id, url=url, points=self.points, undelivered=0, error=error)


def _end_values(result: RunResult | None) -> tuple[dict[str, float], dict[str, str]]:
    """What a run's end logs: its summary metrics and its evaluation as metrics, where its adapter, report and
    best trial are as tags."""
    if result is None:
        return {}, {}
    metrics = {f"summary/{k}": v for k, v in numbers(result.metrics.model_dump()).items()}
    if result.metrics.global_step is not None:
        metrics["global_step"] = float(result.metrics.global_step)
    tags = {}
    if result.evaluation is not None:
        for side, scores in (("challenger", result.evaluation.challenger), ("baseline", result.evaluation.baseline)):
            metrics.update({f"{side}/{k}": v for k, v in numbers(scores.model_dump()).items()})
        if result.evaluation.report_path:
            tags[spec.REPORT_TAG] = result.evaluation.report_path
    if result.adapter_path:
        tags[spec.ADAPTER_TAG] = result.adapter_path
    if result.sweep is not None and result.sweep.best_trial:
        tags[spec.BEST_TAG] = result.sweep.best_trial
        if result.sweep.report_path:
            tags[spec.REPORT_TAG] = result.sweep.report_path
    return metrics, tags


def ended(
    cfg: RunConfig, who: Identity, result: RunResult | None, state: str, worker: dict[str, TrackedRun]
) -> dict[str, TrackedRun]:
    """The driver's end of a tracked run (a run, a trial, a sweep's parent): its summary, evaluation and links
    logged, its state set (FINISHED, FAILED), a copy of the adapter where the config asks; merged with what the
    run's rank 0 said of its own part (`worker`)."""
    runs: dict[str, TrackedRun] = {}
    for logger in open_loggers(cfg, who, with_params=False):
        summary, tags = _end_values(result)
        error = None
        try:
            logger.finish(summary, tags, state)
            _copies(cfg, logger, result)
        except Exception as exc:
            error = redact(describe(exc, 300))
        run = logger.close()
        if error:
            run = run.model_copy(update={"error": error, "undelivered": run.undelivered + len(summary)})
        earlier = worker.get(logger.name)
        runs[logger.name] = earlier.merged(run) if earlier else run
    return runs


def _copies(cfg: RunConfig, logger: Logger, result: RunResult | None) -> None:
    """MLflow's artifacts: the summary always; the adapter where tracking.mlflow.copy_adapter asks, or where it
    is on a local path, which a registry's version cannot name (its source is then `runs:/<run>/adapter`)."""
    if not isinstance(logger, MlflowRun) or result is None:
        return
    logger.client.log_dict(logger.run_id, result.model_dump(mode="json", exclude={"tracking"}), "result.json")
    assert cfg.tracking is not None and cfg.tracking.mlflow is not None
    local = result.adapter_path is not None and not result.adapter_path.startswith("gs://")
    if (cfg.tracking.mlflow.copy_adapter or local) and result.adapter_path:
        from trainer.storage import local_folder

        logger.copy_artifacts(local_folder(result.adapter_path), "adapter")


TRIAL_STATES = {"stopped": "KILLED", "failed": "FAILED", "unfinished": "KILLED"}


def trials_ended(cfg: RunConfig, sweep: Identity, trials: list[Any]) -> None:
    """A trial's own run ends with its driver, except where Tune stopped it first (ASHA: its process is killed
    before it can say): each such child run is closed here as the sweep saw it end (KILLED, FAILED), with
    `raytune.trial_state` saying which (stopped, failed, unfinished)."""
    if cfg.tracking is None:
        return
    for trial in trials:
        if trial.state not in TRIAL_STATES:
            continue
        for name in ("mlflow", "vertex"):  # W&B closes a run whose process ended itself
            if getattr(cfg.tracking, name) is None:
                continue
            child = opened(name, cfg, of_trial(sweep, trial.trial_id), with_params=False)
            if isinstance(child, Unreachable):
                continue
            try:
                child.finish({}, {spec.TRIAL_STATE_TAG: trial.state}, TRIAL_STATES[trial.state])
            except Exception as exc:
                log.warning("%s: %s's run not closed: %s", name, trial.trial_id, redact(describe(exc, 300)))
            child.close()
