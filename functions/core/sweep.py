"""A sweep: one run config searched over a space of its own fields, trial by trial, on the run's worker group.

The config's `sweep` section names fields by their dotted names (`training.learning_rate`, `lora.r`) with a
distribution each; every trial is the config with one draw of them, validated as a whole by the same schema,
so a typo, a value out of a field's bounds or a draw the cross-field rules refuse is REJECTED before launch.
Ray Tune runs the trials (trainer/sweep.py): its search algorithm draws them, its ASHA scheduler stops the
poor ones at an evaluation, and each trial is the trainer's own Ray Train run. Pure: the trainer ships it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from functions.core.fields import with_value
from functions.core.result import SweepResult

# The fields a sweep may search: what changes how a trial trains, never where it runs or what it reads (the
# sizing, the dataset and the storage are the run's and are shared by every trial).
SWEEPABLE = (
    "lora.r",
    "lora.alpha",
    "lora.dropout",
    "training.epochs",
    "training.max_steps",
    "training.per_device_batch_size",
    "training.gradient_accumulation_steps",
    "training.learning_rate",
    "training.lr_scheduler",
    "training.warmup_ratio",
    "training.max_grad_norm",
    "training.optim",
    "training.max_length",
    "training.seed",
)
LOWER_IS_BETTER = frozenset({"eval_loss", "loss"})
# Reported at each evaluation (each checkpoint of a trial), so ASHA can compare trials at its rungs; ROUGE-L and
# BLEU need generation and are measured once, at a finished trial's end.
EACH_EVALUATION = ("eval_loss", "loss")

# What a sweep reads of the config it belongs to (functions/core/config.py's RunConfig, which imports this module
# and validates its sweep with `problems`): named here by shape, so the import runs one way.


class Ranking(Protocol):
    """The config's evaluation section: what the champion rule ranks by and how many samples it scores."""

    @property
    def metric(self) -> str: ...
    @property
    def samples(self) -> int: ...


class HeldOut(Protocol):
    @property
    def eval_fraction(self) -> float: ...


class Swept(Protocol):
    """A run config, as far as a sweep reads it: its sweep, evaluation and held-out set, and the schema that
    validates a trial's config (pydantic's)."""

    @property
    def sweep(self) -> SweepSpec | None: ...
    @property
    def evaluation(self) -> Ranking: ...
    @property
    def dataset(self) -> HeldOut: ...
    def model_dump(self, *, mode: str = ..., exclude: Any = ...) -> dict[str, Any]: ...
    @classmethod
    def model_validate(cls, obj: Any, *, context: Any | None = None) -> Self: ...


C = TypeVar("C", bound=Swept)

Scalar = bool | int | float | Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class LogUniform(Spec):
    kind: Literal["loguniform"]
    """loguniform: draws uniform in the logarithm between low and high."""
    low: Annotated[float, Field(gt=0)]
    """The smallest value (above 0); draws are uniform in its logarithm."""
    high: Annotated[float, Field(gt=0)]
    """The largest value."""


class Uniform(Spec):
    kind: Literal["uniform"]
    """uniform: draws uniform between low and high."""
    low: float
    """The smallest value."""
    high: float
    """The largest value."""


class RandInt(Spec):
    kind: Literal["randint"]
    """randint: draws an integer from low to high, both included."""
    low: int
    """The smallest integer."""
    high: int
    """The largest integer (drawn too)."""


class Choice(Spec):
    kind: Literal["choice"]
    """choice: draws one of the values."""
    values: Annotated[list[Scalar], Field(min_length=1, max_length=32)]
    """The values a trial takes one of, each equally likely."""


Dimension = Annotated[LogUniform | Uniform | RandInt | Choice, Field(discriminator="kind")]
FieldPath = Annotated[str, StringConstraints(pattern=r"^[a-z_]+\.[a-z_]+$", max_length=64)]


class SweepSpec(Spec):
    space: Annotated[dict[FieldPath, Dimension], Field(min_length=1, max_length=len(SWEEPABLE))]
    """The fields searched, by dotted name, each with its distribution: {"kind": "loguniform" | "uniform",
    "low", "high"}, {"kind": "randint", "low", "high"} or {"kind": "choice", "values": [...]}."""
    trials: Annotated[int, Field(ge=1, le=256)] = 8
    """How many trials are drawn and run."""
    concurrent: Annotated[int, Field(ge=1, le=64)] = 2
    """How many trials run at once; the run's worker group holds scaling.nodes for each of them."""
    metric: Literal["eval_loss", "rougeL", "bleu", "loss"] | None = None
    """What picks the best trial, measured on a finished trial's final adapter (its last report for eval_loss
    and loss); None: the champion rule's (evaluation.metric) where evaluation.samples are scored, else eval_loss."""
    mode: Literal["min", "max"] | None = None
    """min or max; None: the metric's own (losses lower, ROUGE-L and BLEU higher). A contrary mode is refused."""
    scheduler: Literal["asha", "none"] = "asha"
    """asha: Ray Tune's ASHA stops trials whose loss at an evaluation is among the worst at that rung (on the
    sweep's metric when it is a loss, else on eval_loss); none: every trial runs to its end."""
    grace_evaluations: Annotated[int, Field(ge=1, le=1000)] = 1
    """Evaluations every trial gets before ASHA may stop it."""
    reduction_factor: Annotated[int, Field(ge=2, le=8)] = 2
    """ASHA keeps the best 1 / reduction_factor of the trials at each rung."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """Seeds the draws: the same seed and space draw the same trials."""
    max_cost: Annotated[float, Field(gt=0)] | None = None
    """A sweep whose upper cost estimate (every trial run to its end) is above this is REJECTED at launch."""

    def ranked_by(self, evaluation: Ranking) -> str:
        if self.metric:
            return self.metric
        return evaluation.metric if evaluation.samples else "eval_loss"

    def direction(self, evaluation: Ranking) -> Literal["min", "max"]:
        return "min" if self.ranked_by(evaluation) in LOWER_IS_BETTER else "max"

    def stops_on(self, evaluation: Ranking) -> str:
        """The metric ASHA compares trials on at each evaluation."""
        metric = self.ranked_by(evaluation)
        return metric if metric in EACH_EVALUATION else "eval_loss"


def trial_config(cfg: C, params: dict[str, Any], context: dict[str, Any] | None = None) -> C:
    """The config one trial trains: the run's with the trial's values and no sweep of its own."""
    data = cfg.model_dump(mode="json", exclude={"sweep"})
    for path, value in params.items():
        data = with_value(data, path, value)
    return type(cfg).model_validate(data, context=context)


def json_value(value: Any) -> tuple[str, Any]:
    """A choice as JSON Schema compares values: numbers by value (8 and 8.0 are equal), a boolean never a number."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    return ("string", value)


def candidates(dimension: Dimension) -> list[Any]:
    """Values that bound what a dimension draws: its ends, or each choice."""
    if isinstance(dimension, Choice):
        return list(dimension.values)
    return [dimension.low, dimension.high]


def problems(cfg: Swept) -> list[str]:
    """Why the config's sweep cannot run (empty: it can): unknown or unsweepable fields, a distribution the
    field's type refuses, ends or choices the field's bounds or the config's rules refuse, a metric nothing
    measures, more trials at once than trials."""
    sweep = cfg.sweep
    if sweep is None:
        return []
    found: list[str] = []
    evaluation = cfg.evaluation
    for path, dimension in sweep.space.items():
        if path not in SWEEPABLE:
            found.append(f"sweep.space.{path}: not a field a sweep may search; one of {', '.join(SWEEPABLE)}")
            continue
        if not isinstance(dimension, Choice) and dimension.low >= dimension.high:
            found.append(f"sweep.space.{path}: low ({dimension.low}) must be below high ({dimension.high})")
            continue
        if isinstance(dimension, Choice) and len({json_value(v) for v in dimension.values}) < len(dimension.values):
            found.append(f"sweep.space.{path}: a value is listed twice (8 and 8.0 are one value, as in JSON)")
        probes = candidates(dimension)
        if isinstance(dimension, (LogUniform, Uniform)):
            # A value with a fraction (an integer field refuses it: draws of this kind are never whole).
            probes.append(dimension.low + min(0.5, (dimension.high - dimension.low) / 2))
        for value in probes:
            try:
                trial_config(cfg, {path: value})
            except ValidationError as err:
                first = err.errors()[0]
                found.append(f"sweep.space.{path}: {value!r} is refused: {first['msg']}")
                break
    metric = sweep.ranked_by(evaluation)
    if sweep.mode is not None and sweep.mode != sweep.direction(evaluation):
        found.append(f"sweep.mode: {metric} is better {sweep.direction(evaluation)}, not {sweep.mode}")
    if metric in ("rougeL", "bleu") and not cfg.evaluation.samples:
        found.append(f"sweep.metric: {metric} is measured on evaluation.samples; set it above 0")
    stops_on_eval = sweep.scheduler == "asha" and sweep.stops_on(evaluation) == "eval_loss"
    if (metric == "eval_loss" or stops_on_eval) and not cfg.dataset.eval_fraction:
        found.append("sweep: eval_loss (the metric or ASHA's) needs a held-out set: set dataset.eval_fraction above 0")
    if sweep.concurrent > sweep.trials:
        found.append(f"sweep.concurrent ({sweep.concurrent}) is more than sweep.trials ({sweep.trials})")
    return found


def trial_lines(result: SweepResult) -> list[str]:
    """A sweep's trials for people: one line of counts and the best, then a row per trial."""
    counts: dict[str, int] = {}
    for trial in result.trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    said = ", ".join(f"{n} {'stopped early' if state == 'stopped' else state}" for state, n in counts.items())
    scheduler = f" (ASHA on {result.stopped_on})" if result.stopped_on else ""
    lines = [
        f"  sweep            {len(result.trials)} trials: {said}{scheduler}; "
        f"best {result.best_trial} by {result.metric} ({result.mode})"
    ]
    if result.report_path:
        lines.append(f"  sweep report     {result.report_path}")
    fields = sorted({path for trial in result.trials for path in trial.params})
    rows = [["trial", "state", result.metric, *fields, "wall"]]
    for trial in result.trials:
        state = f"stopped at {trial.stopped_at_step}" if trial.state == "stopped" else trial.state
        rows.append(
            [
                trial.trial_id + (" *" if trial.trial_id == result.best_trial else ""),
                state,
                "-" if trial.metric is None else f"{trial.metric:.4f}",
                *(shown(trial.params.get(path)) for path in fields),
                "-" if trial.wall_seconds is None else f"{trial.wall_seconds:.0f}s",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += [
        "    " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return lines


def shown(value: Any) -> str:
    """A swept value for people: floats to 3 significant digits ("-" for none)."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def shown_values(params: dict[str, Any]) -> str:
    """A trial's values for people: `lora.r=16, training.learning_rate=0.0002`."""
    return ", ".join(f"{path}={shown(value)}" for path, value in params.items())
