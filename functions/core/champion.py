"""Champion and challenger: per *line* (a config name, evaluated the same way: the same dataset, held-out
split and samples, on the same metric), `champions/<name>/<evaluation key>.json` points at the adapter in use.
A run that evaluated its new adapter against that champion (or the base model, when there was none) takes its
place only when it wins on the configured metric by more than the configured margin, on the same
samples. The decision is `judge`; the handler writes its outcome with compare-and-swap.

Keyed by name alone (the previous release's `champions/<name>.json`), any config reusing the name with a dataset
of its own and margin 0 took over the champion by winning on its own samples; now such a config starts a line
of its own, and the two never meet."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math

from pydantic import BaseModel, Field

from functions.core.config import EvaluationSpec, RunConfig
from functions.core.release import Stamped
from functions.core.result import Evaluation, RunResult, Scores, SweepResult

CHAMPIONS_PREFIX = "champions/"


class Champion(Stamped, BaseModel):
    name: str  # the config name
    evaluation_key: str | None = None  # line_key's evaluation part (None: a pointer of the previous release)
    run_id: str
    adapter_path: str
    scores: Scores  # as measured when it won
    metric: str
    promoted_at: dt.datetime
    previous_run_id: str | None = None
    generation: int = Field(0, exclude=True)


class Promotion(BaseModel):
    """What a finished run did to its config name's champion, and why; in the record and run-finished event."""

    promoted: bool
    reason: str
    metric: str | None = None
    challenger: float | None = None
    baseline: float | None = None
    champion_run_id: str | None = None  # the champion after this decision
    # A promotion in a tracked line: the registered model's version the `champion` alias now points at, or why
    # it could not be moved (the pointer in the bucket moved either way: it is the source of truth).
    registered: str | None = None
    registry_error: str | None = None

    def describe(self) -> str:
        said = f"{'promoted to champion' if self.promoted else 'not promoted'}: {self.reason}"
        if self.registered:
            said += f"; champion alias -> {self.registered}"
        if self.registry_error:
            said += f"; champion alias not moved: {self.registry_error}"
        return said


def path(line: str) -> str:
    return f"{CHAMPIONS_PREFIX}{line}.json"


def evaluation_key(cfg: RunConfig) -> str:
    """What makes two runs' evaluations comparable: the dataset and its held-out split (which samples, chosen
    how), the fields read, how many are described, and the metric judged."""
    data, evaluation = cfg.dataset, cfg.evaluation
    identity = {
        "dataset": data.model_dump(mode="json"),
        "samples": evaluation.samples,
        "metric": evaluation.metric,
    }
    if data.id.startswith("tiny://"):
        identity["seed"] = cfg.training.seed  # the built-in dataset is generated from it
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def line(cfg: RunConfig) -> str:
    """The champion pointer's key for this config: `<name>/<evaluation key>`."""
    return f"{cfg.name}/{evaluation_key(cfg)}"


def unfit_best_trial(sweep: SweepResult | None) -> str | None:
    """Why a sweep's named best trial cannot stand for the run (None: it can, or the run is no sweep): it must be
    listed, finished (not failed, not stopped early) and scored with a finite metric."""
    if sweep is None:
        return None
    best = next((t for t in sweep.trials if t.trial_id == sweep.best_trial), None)
    if best is None:
        return f"the sweep names {sweep.best_trial} its best trial but lists no such trial"
    if best.state != "finished":
        state = "was stopped early" if best.state == "stopped" else f"is {best.state}"
        return f"the sweep's best trial {best.trial_id} {state}, not finished"
    if best.metric is None or not math.isfinite(best.metric):
        return f"the sweep's best trial {best.trial_id} has {sweep.metric} {best.metric}, not a number to rank"
    return None


def judge(run_id: str, result: RunResult | None, spec: EvaluationSpec, current: Champion | None) -> Promotion:
    keep = current.run_id if current else None
    evaluation = result.evaluation if result else None
    if evaluation is None or result is None:
        why = "not evaluated (evaluation.samples is 0)" if not spec.samples else "the trainer wrote no evaluation"
        return Promotion(promoted=False, reason=why, champion_run_id=keep)
    if not result.adapter_path:
        return Promotion(promoted=False, reason="the run saved no adapter", champion_run_id=keep)
    if unfit := unfit_best_trial(result.sweep):
        return Promotion(promoted=False, reason=unfit, champion_run_id=keep)
    if current is not None and current.run_id == run_id:
        return Promotion(promoted=True, reason="already the champion", metric=spec.metric, champion_run_id=run_id)
    if current is not None and current.run_id != evaluation.champion_run_id:
        against = evaluation.champion_run_id or "the base model"
        return Promotion(
            promoted=False,
            reason=f"the champion changed during the run (now {current.run_id}; evaluated against {against}), "
            "so the two were not compared on the same samples",
            metric=spec.metric,
            champion_run_id=keep,
        )
    challenger = getattr(evaluation.challenger, spec.metric)
    baseline = getattr(evaluation.baseline, spec.metric)
    if any(score is not None and not math.isfinite(score) for score in (challenger, baseline)):
        diverged = f"{spec.metric} is not a number ({challenger} vs {baseline}): a diverged model is never compared"
        return Promotion(promoted=False, reason=diverged, metric=spec.metric, champion_run_id=keep)
    scores = {"metric": spec.metric, "challenger": challenger, "baseline": baseline, "champion_run_id": keep}
    against = f"champion {evaluation.champion_run_id}" if evaluation.champion_run_id else "the base model"
    gain = evaluation.gain(spec.metric)
    if gain is None or challenger is None or baseline is None:
        return Promotion(promoted=False, reason=f"{spec.metric} was not measured for both models", **scores)
    verdict = f"{spec.metric} {challenger:.4f} vs {baseline:.4f} of {against}: "
    if gain > spec.margin:
        scores["champion_run_id"] = run_id
        return Promotion(promoted=True, reason=verdict + f"better by {gain:.4f} > margin {spec.margin}", **scores)
    return Promotion(promoted=False, reason=verdict + f"gain {gain:.4f} is not above margin {spec.margin}", **scores)


def restored(current: Champion, earlier_run_id: str, earlier: RunResult, now: dt.datetime) -> Champion:
    """A person's rollback: the champion `current` replaced by the one it replaced, as that one won (its adapter,
    its scores), whose own predecessor is the champion it was evaluated against (so a rollback may go on back)."""
    if earlier.evaluation is None or not earlier.adapter_path:
        raise ValueError(f"{earlier_run_id} has no evaluated adapter in its record: it cannot be the champion again")
    return Champion(
        name=current.name,
        evaluation_key=current.evaluation_key,
        run_id=earlier_run_id,
        adapter_path=earlier.adapter_path,
        scores=earlier.evaluation.challenger,
        metric=current.metric,
        promoted_at=now,
        previous_run_id=earlier.evaluation.champion_run_id,
    )


def crowned(
    cfg: RunConfig, run_id: str, adapter_path: str, evaluation: Evaluation, now: dt.datetime, previous: Champion | None
) -> Champion:
    """The pointer to a promoted run's adapter."""
    return Champion(
        name=cfg.name,
        evaluation_key=evaluation_key(cfg),
        run_id=run_id,
        adapter_path=adapter_path,
        scores=evaluation.challenger,
        metric=cfg.evaluation.metric,
        promoted_at=now,
        previous_run_id=previous.run_id if previous else None,
    )
