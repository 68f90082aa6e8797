"""A sweep's driver: Ray Tune's Tuner runs the config's trials on the run's worker group, each trial the
trainer's own Ray Train run (one_fit.fit) whose reports reach Tune through Ray's TuneReportCallback.

- Draws: Tune's BasicVariantGenerator over the config's space, seeded by sweep.seed.
- Early stopping: Tune's ASHA on the loss reported at each evaluation (a trial stopped early has no adapter).
- Storage, under the run's: the Tune experiment at <storage>/<run_id>/ (its state, every trial's reports), each
  trial's Ray Train run at <storage>/<run_id>/trials/<trial_id>/ with its own result.json, and the run's
  result.json (the best finished trial's, with every trial's summary) at <storage>/<run_id>/result.json.
- Failures: a trial that fails past its Ray Train restarts (scaling.max_failures: a lost node) starts again, up
  to scaling.max_attempts in all, and resumes from its last checkpoint (its Ray Train run, named by the trial's
  number, restores it); the others go on. A trial failed past those fails the job once the rest have ended;
  the controller's next attempt (lost nodes) or `raytune retry` restores the experiment: finished and stopped
  trials are not run again, a failed or interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

from functions.core.config import RunConfig
from functions.core.result import (
    PROGRESS_MARKER,
    RESULT_FILE,
    TRIAL_DRIVER_RESOURCE,
    RunResult,
    SweepResult,
    TrackedRun,
    TrialResult,
)
from functions.core.sweep import Choice, LogUniform, RandInt, SweepSpec, Uniform, shown_values, trial_config
from trainer import fit as one_fit

if TYPE_CHECKING:
    from trainer.tracking import Identity

TRIALS_DIR = "trials"
TRIAL_KEY = "trial"  # each trial's number in the search space
HISTORY_KEYS = ("eval_loss", "loss")
# A trial's last report (its adapter, with no loss in it) would otherwise fail Tune's check that every report
# carries the scheduler's metric.
STRICT_METRICS_ENV = "TUNE_DISABLE_STRICT_METRIC_CHECKING"
# How often Tune saves the experiment's state (its default: every 10 s at least), all a later attempt resumes from.
STATE_PERIOD_ENV, STATE_PERIOD_S = "TUNE_GLOBAL_CHECKPOINT_S", "2"


class TrialFailed(RuntimeError):
    """A trial failed past its restarts: the sweep's job fails with its cause once the others have ended, and
    the next attempt resumes the sweep (the failed trial from its last checkpoint)."""


def search_space(sweep: SweepSpec) -> dict[str, Any]:
    """The swept fields' distributions, and each trial's number (a grid of them, one trial each): the name its
    Ray Train run, checkpoints and result keep across attempts, whatever id Tune gives a restarted trial."""
    from ray import tune

    def domain(dimension: Any) -> Any:
        if isinstance(dimension, LogUniform):
            return tune.loguniform(dimension.low, dimension.high)
        if isinstance(dimension, Uniform):
            return tune.uniform(dimension.low, dimension.high)
        if isinstance(dimension, RandInt):
            return tune.randint(dimension.low, dimension.high + 1)  # Tune's upper end is exclusive
        assert isinstance(dimension, Choice)
        return tune.choice(dimension.values)

    space = {path: domain(dimension) for path, dimension in sweep.space.items()}
    return {**space, TRIAL_KEY: tune.grid_search(list(range(sweep.trials)))}


def trial_name(params: dict[str, Any]) -> str:
    return f"trial-{int(params[TRIAL_KEY]):03d}"


def drawn(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's values of the swept fields (JSON's types: Tune's draws are numpy's)."""
    return {key: value.item() if hasattr(value, "item") else value for key, value in params.items() if key != TRIAL_KEY}


def variants(sweep: SweepSpec) -> Any:
    """Ray Tune's generator of the trials, seeded, at most sweep.concurrent live, and resumable: restored, it
    forgets the trials live in the earlier attempt (none is; Tune itself requeues those it restores) and that it
    was told to stop, which it would otherwise wait for forever and so begin none of the trials left."""
    from ray.tune.search.basic_variant import BasicVariantGenerator

    class ResumableVariants(BasicVariantGenerator):
        def set_state(self, state: dict) -> None:
            super().set_state(state)
            self._live_trials: set[str] = set()
            self._finished = False  # its trials' iterator says when they are all begun

    return ResumableVariants(max_concurrent=sweep.concurrent, random_state=sweep.seed)


def check_head() -> None:
    """A head started before sweeps existed lacks the trial drivers' resource, and KubeRay does not restart a
    running head for a new spec: the trials would wait for it forever. Said at once, with the way out."""
    import ray

    if not ray.cluster_resources().get(TRIAL_DRIVER_RESOURCE):
        raise RuntimeError(
            f"the Ray head has no {TRIAL_DRIVER_RESOURCE} resource, which a sweep's trials run on: its RayCluster "
            "was made by an earlier release. Delete it once no run uses it (`kubectl delete raycluster NAME -n "
            "NAMESPACE`, or wait for its idle teardown, cluster.idle_delete_seconds); the next launch makes it anew"
        )


def trials_config(cfg: RunConfig, run_id: str, params: dict[str, Any]) -> RunConfig:
    """A trial's config: the run's with the trial's values, training under the run's trials folder."""
    storage = f"{one_fit.run_folder(cfg, run_id)}/{TRIALS_DIR}"
    return trial_config(cfg, params).model_copy(update={"storage_path": storage})


def trainable(cfg: RunConfig, run_id: str, champion: dict | None, sweep_run: Identity) -> Any:
    def trial(params: dict[str, Any]) -> None:
        from ray.tune.integration.ray_train import TuneReportCallback

        from trainer import progress, tracking

        # Ray Train takes it from the process that starts the run: here the trial's, not the job's driver.
        os.environ.setdefault(one_fit.PRINT_PATCH_ENV, "0")
        trial_id = trial_name(params)
        trained = trials_config(cfg, run_id, drawn(params))
        if finished(trained, trial_id) is not None:  # ended after Tune last saved its state, before a lost node
            print(f"{trial_id}: finished in an earlier attempt, not trained again", flush=True)
            return
        print(f"{trial_id}: {shown_values(drawn(params))}", flush=True)
        # Its phases are said with its name: "trial-002 · starting 1 workers..." is the console's word that it began.
        timeline = progress.Timeline(trial=trial_id)
        who = tracking.of_trial(sweep_run, trial_id)
        summary = one_fit.fit(trained, trial_id, champion, timeline, [TuneReportCallback()], trial=who)
        one_fit.write_result(summary, trained, trial_id)

    # The trial's process only drives its Ray Train run, on the head: the workers hold the group's CPUs and GPUs.
    from ray import tune

    return tune.with_resources(trial, {"CPU": 0, TRIAL_DRIVER_RESOURCE: 1})


def announced_asha(**asha: Any) -> Any:
    """Ray Tune's ASHA that says when it stops a trial, as a progress line of that trial (`raytune logs` and the
    console show "trial-002 stopped early at step 8 (ASHA: ...)"): otherwise the trial's lines just end, as if it
    had crashed. `asha`: ASHAScheduler's own arguments, whose metric and reduction factor the line names."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    metric, factor = asha["metric"], asha["reduction_factor"]

    class Announced(ASHAScheduler):
        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            decision = super().on_trial_result(tune_controller, trial, result)
            if decision == TrialScheduler.STOP and TRIAL_KEY in (trial.config or {}):
                step = int(result.get("step") or result.get("training_iteration") or 0)
                value = result.get(metric)
                said = f"{metric} {value:.4f}" if isinstance(value, int | float) else metric
                why = f"ASHA: {said}, not in the best 1/{factor} of the trials at its rung"
                line = {"trial": trial_name(trial.config), "step": step, "max_steps": step, "stopped_early": why}
                print(PROGRESS_MARKER + json.dumps(line), flush=True)
            return decision

    return Announced(**asha)


def tuner_of(cfg: RunConfig, run_id: str, work: Any, stops_on: str | None) -> Any:
    """Ray Tune's Tuner of the sweep: restored from the run's experiment where an earlier attempt left one."""
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler

    from trainer.storage import filesystem

    sweep = cfg.sweep
    assert sweep is not None
    fs, path = filesystem(one_fit.storage_of(cfg))
    experiment = f"{path.rstrip('/')}/{run_id}"
    if tune.Tuner.can_restore(experiment, storage_filesystem=fs):
        print(f"resuming the sweep from {experiment}", flush=True)
        # A failed trial starts again under a new Tune id; its number names the Ray Train run, which restores
        # its last checkpoint. (Tune's own resume of an errored function trial ends it at once.)
        return tune.Tuner.restore(experiment, work, restart_errored=True, storage_filesystem=fs)
    else:
        scheduler = (
            announced_asha(
                time_attr="training_iteration",
                metric=stops_on,
                mode="min",
                grace_period=sweep.grace_evaluations,
                reduction_factor=sweep.reduction_factor,
                max_t=10_000,
            )
            if stops_on
            else FIFOScheduler()
        )
        return tune.Tuner(
            work,
            param_space=search_space(sweep),
            tune_config=tune.TuneConfig(
                num_samples=1,  # each trial number of the grid once
                # Tune's own max_concurrent_trials is ignored with a generator; the generator holds to it itself.
                search_alg=variants(sweep),
                scheduler=scheduler,
            ),
            run_config=tune.RunConfig(
                name=run_id,
                storage_path=path,
                storage_filesystem=fs,
                verbose=1,
                # A trial that fails past its Ray Train restarts (a lost node) starts again, as a run's next
                # attempt does: its Ray Train run (named by its number) restores its last checkpoint. Not
                # fail_fast: Tune restores its "has errored" flag with the experiment and would stop a restored
                # sweep at once.
                failure_config=tune.FailureConfig(max_failures=cfg.scaling.max_attempts - 1),
            ),
        )


def run(cfg: RunConfig, run_id: str, champion: dict | None, timeline: Any) -> RunResult:
    from trainer import trackers

    sweep = cfg.sweep
    assert sweep is not None
    check_head()
    os.environ[STRICT_METRICS_ENV] = "1"
    os.environ.setdefault(STATE_PERIOD_ENV, STATE_PERIOD_S)
    stops_on = sweep.stops_on(cfg.evaluation) if sweep.scheduler == "asha" else None
    sweep_run = trackers.open_parent(cfg, run_id)
    tuner = tuner_of(cfg, run_id, trainable(cfg, run_id, champion, sweep_run), stops_on)
    try:
        with timeline.phase(f"sweeping {sweep.trials} trials, {sweep.concurrent} at once"):
            grid = tuner.fit()
        trials = [trial_of(result, cfg, run_id, sweep.ranked_by(cfg.evaluation)) for result in grid]
        if cfg.tracking is not None:
            trackers.trials_ended(cfg, sweep_run, trials)
        if failed := [t for t in trials if t.state == "failed"]:
            raise TrialFailed(f"trial {failed[0].trial_id} failed: {failed[0].error}")
        summary = best_of(trials, cfg, run_id, stops_on)
    except BaseException:
        if cfg.tracking is not None:
            trackers.ended(cfg, sweep_run, None, "FAILED", {})
        raise
    assert summary.sweep is not None
    summary.sweep.report_path = write_report(cfg, run_id, summary)
    if cfg.tracking is not None:
        trackers.mark_best(cfg, summary.tracking, sweep_run)
        summary.tracking = trackers.ended(cfg, sweep_run, summary, "FINISHED", trials_tracking(cfg, run_id, trials))
    return summary


def trials_tracking(cfg: RunConfig, run_id: str, trials: list[TrialResult]) -> dict[str, TrackedRun]:
    """What the finished trials' own tracked runs missed, summed: the sweep's story says it once."""
    summed: dict[str, TrackedRun] = {}
    for trial in trials:
        ran = finished(trials_config(cfg, run_id, trial.params), trial.trial_id) if trial.state == "finished" else None
        for name, run in (ran.tracking if ran else {}).items():
            counted = TrackedRun(points=run.points, undelivered=run.undelivered, error=run.error)
            summed[name] = summed[name].merged(counted) if name in summed else counted
    return summed


def write_report(cfg: RunConfig, run_id: str, summary: RunResult) -> str:
    """report.html in the run's folder (the trials), linking the best trial's own report; its path."""
    from trainer.report import REPORT_FILE
    from trainer.storage import filesystem
    from trainer.sweep_report import render

    assert summary.sweep is not None
    folder = one_fit.run_folder(cfg, run_id)
    best_report = summary.evaluation.report_path if summary.evaluation else None
    relative = best_report.removeprefix(f"{folder}/") if best_report and best_report.startswith(f"{folder}/") else None
    page = render(run_id, cfg, summary.sweep, relative)
    fs, path = filesystem(f"{folder}/{REPORT_FILE}")
    with fs.open_output_stream(path) as out:
        out.write(page.encode())
    return f"{folder}/{REPORT_FILE}"


def trial_of(result: Any, cfg: RunConfig, run_id: str, metric: str) -> TrialResult:
    """One trial's summary from Tune's result and, for a finished trial, its own result.json; `metric` the
    sweep's."""
    params, trial_id = drawn(result.config), trial_name(result.config)
    history = history_of(result)
    wall = result.metrics.get("time_total_s")
    summary = finished(trials_config(cfg, run_id, params), trial_id)
    if summary is not None:
        state = "finished"
    elif result.error is not None:
        state = "failed"
    elif result.metrics.get("done"):
        state = "stopped"
    else:
        state = "unfinished"
    return TrialResult(
        trial_id=trial_id,
        params=params,
        state=state,
        metric=metric_of(summary, history, metric),
        history=history,
        stopped_at_step=int(history[-1]["step"]) if state == "stopped" and history else None,
        wall_seconds=round(wall, 1) if wall is not None else None,
        node_seconds=round(wall * cfg.scaling.nodes, 1) if wall is not None else None,
        gpu_seconds=round(wall * cfg.scaling.nodes * cfg.scaling.gpus_per_node, 1) if wall is not None else None,
        adapter_path=summary.adapter_path if summary else None,
        error=str(result.error).splitlines()[0][:500] if result.error is not None else None,
    )


def finished(trained: RunConfig, trial_id: str) -> RunResult | None:
    """A trial's own result.json, which it writes when it has finished (None: it has not)."""
    from trainer.storage import filesystem

    fs, path = filesystem(f"{one_fit.run_folder(trained, trial_id)}/{RESULT_FILE}")
    if fs.get_file_info(path).type.name != "File":
        return None
    with fs.open_input_stream(path) as stream:
        return RunResult.model_validate_json(stream.read())


def history_of(result: Any) -> list[dict[str, float]]:
    """The trial's reports at its evaluations: the step and the losses reported there."""
    frame = result.metrics_dataframe
    if frame is None or "step" not in frame:
        return []
    rows = []
    for _, row in frame.iterrows():
        kept = {key: float(row[key]) for key in HISTORY_KEYS if key in row and _number(row[key])}
        if kept and _number(row["step"]):
            rows.append({"step": float(row["step"]), **kept})
    return rows


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def metric_of(summary: RunResult | None, history: list[dict[str, float]], metric: str) -> float | None:
    """A trial's sweep metric: its final adapter's evaluation where it has one, else its last report's."""
    if summary is not None and summary.evaluation is not None:
        scored = getattr(summary.evaluation.challenger, metric, None)
        if scored is not None:
            return float(scored)
    reported = [row[metric] for row in history if metric in row]
    return reported[-1] if reported else None


def best_of(trials: list[TrialResult], cfg: RunConfig, run_id: str, stops_on: str | None) -> RunResult:
    """The run's result: its best finished trial's, with every trial beside it."""
    sweep = cfg.sweep
    assert sweep is not None
    metric, mode = sweep.ranked_by(cfg.evaluation), sweep.direction(cfg.evaluation)
    # A diverged trial (NaN, inf) never ranks, wherever it is listed.
    ranked = [t for t in trials if t.state == "finished" and t.metric is not None and math.isfinite(t.metric)]
    if not ranked:
        said = "; ".join(
            f"{t.trial_id} {t.state}"
            + (f" with {metric} {t.metric}" if t.metric is not None else "")
            + (f": {t.error}" if t.error else "")
            for t in trials
        )
        raise RuntimeError(f"no trial of the sweep finished with a finite {metric}: {said}")
    best = (min if mode == "min" else max)(ranked, key=lambda t: float(t.metric or 0.0))
    summary = finished(trials_config(cfg, run_id, best.params), best.trial_id)
    assert summary is not None  # ranked: finished
    summary.run_id, summary.name = run_id, cfg.name
    summary.storage_path = one_fit.run_folder(cfg, run_id)
    summary.sweep = SweepResult(metric=metric, mode=mode, stopped_on=stops_on, best_trial=best.trial_id, trials=trials)
    return summary
