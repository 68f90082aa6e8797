"""The line of adapters of a config name: what its last successful nightly trained on (so an unchanged
night is skipped) and which adapter is its champion (so a better one takes over). Both are pointers in
the bucket, moved only by compare-and-swap; the decisions are functions/core/fingerprint.py and
functions/core/champion.py."""

from __future__ import annotations

import json
import logging

from functions.adapters import datasets, registry
from functions.core import champion, fingerprint, tracking
from functions.core.champion import Champion, Promotion
from functions.core.config import RunConfig
from functions.core.errors import Unreadable, describe
from functions.core.fingerprint import Inputs, LastTrained
from functions.core.result import CHAMPION_ENV
from functions.core.runs import RunRecord
from functions.core.secrets import redact
from functions.handlers.context import Context

log = logging.getLogger(__name__)


def inputs(ctx: Context, record: RunRecord, cfg: RunConfig) -> Inputs:
    """The nightly's fingerprinted inputs, compared with its config name's last successful nightly."""
    assert record.config is not None
    versions, unversioned = datasets.versions(cfg.dataset, ctx.settings.hf_token)
    live = [
        (other.run_id, other.inputs.fingerprint)
        for other in ctx.store.active()
        if other.run_id != record.run_id
        and other.nightly
        and not other.state.terminal
        and other.inputs is not None
        and (other.config or {}).get("name") == cfg.name
    ]
    return fingerprint.inputs(
        record.config, ctx.platform.code_sha256(), versions, unversioned, ctx.nightlies.get(cfg.name), live
    )


def conclude(ctx: Context, record: RunRecord, cfg: RunConfig) -> Promotion:
    """A succeeded run: a nightly's inputs become the baseline of the next night; an evaluated adapter
    meets the champion and takes its place if it wins (judged again on the pointer as stored)."""
    if record.nightly and record.inputs is not None and record.inputs.fingerprint is not None:
        _remember(ctx, record, cfg.name, record.inputs.fingerprint)
    verdict: list[Promotion] = []

    def change(current: Champion | None) -> Champion | None:
        current = current or _adopted(ctx, cfg)
        verdict[:] = [champion.judge(record.run_id, record.result, cfg.evaluation, current)]
        if not verdict[0].promoted or (current is not None and current.run_id == record.run_id):
            return None
        result = record.result
        assert result is not None and result.evaluation is not None  # judged promoted
        return champion.crowned(cfg, record.run_id, result.adapter_path or "", result.evaluation, ctx.clock(), current)

    if cfg.evaluation.samples:
        ctx.champions.swap(champion.line(cfg), change)
    else:
        verdict.append(champion.judge(record.run_id, record.result, cfg.evaluation, None))
    promotion = _aliased(ctx, record, cfg, verdict[0]) if cfg.evaluation.samples else verdict[0]
    log.info("%s: %s", record.run_id, promotion.describe(), extra={"run_id": record.run_id})
    return promotion


def _aliased(ctx: Context, record: RunRecord, cfg: RunConfig, promotion: Promotion) -> Promotion:
    """A tracked line's `champion` alias follows the pointer in the bucket, whichever run that names: this run's
    adapter registered as a version of the line's model when it won, or the champion's again when an earlier
    move was lost. A registry that is down never fails the run; the pointer stays the source of truth."""
    spec = cfg.tracking.mlflow if cfg.tracking else None
    result = record.result
    tracked = result.tracking.get("mlflow") if result else None
    uri = (spec.uri if spec else None) or (tracked.uri if tracked else None)
    champion_run = promotion.champion_run_id
    if spec is None or uri is None or champion_run is None:
        return promotion
    if champion_run == record.run_id:
        adapter = result.adapter_path if result else None
    else:
        current = ctx.champions.get(champion.line(cfg))
        adapter = current.adapter_path if current is not None and current.run_id == champion_run else None
    if not adapter:
        return promotion
    model = tracking.registered_model(spec, cfg.name)
    experiment = tracking.experiment_name(cfg.tracking, cfg.name) if cfg.tracking else cfg.name
    try:
        version = registry.move_champion(uri, model, experiment, champion_run, adapter)
    except Exception as exc:
        log.warning("%s: the champion alias of %s not moved: %s", record.run_id, model, describe(exc))
        return promotion.model_copy(update={"registry_error": redact(describe(exc, 300))})
    return promotion.model_copy(update={"registered": f"mlflow model {model} version {version}"})


def _remember(ctx: Context, record: RunRecord, name: str, print_: str) -> None:
    def change(current: LastTrained | None) -> LastTrained | None:
        if current is not None and current.created_at > record.created_at:
            return None  # a later night already trained: an older run ending late never moves it back
        if current is not None and current.run_id == record.run_id:
            return None
        return LastTrained(name=name, run_id=record.run_id, fingerprint=print_, created_at=record.created_at)

    ctx.nightlies.swap(name, change)


def trainer_env(ctx: Context, cfg: RunConfig) -> dict[str, str]:
    """The champion at submission, for the trainer to evaluate against and warm-start from."""
    if not cfg.evaluation.samples and cfg.training.init_adapter != "champion":
        return {}
    current = ctx.champions.get(champion.line(cfg)) or _adopted(ctx, cfg)
    if current is None:
        return {}
    return {CHAMPION_ENV: json.dumps({"run_id": current.run_id, "adapter_path": current.adapter_path})}


def _adopted(ctx: Context, cfg: RunConfig) -> Champion | None:
    """The previous release's pointer (`champions/<name>.json`, keyed by name alone), taken over by this line
    only when the run it names was evaluated the same way (its record's config says so); otherwise this
    line starts from the base model and the old pointer stays for whoever it belongs to."""
    legacy = ctx.champions.get(cfg.name)
    if legacy is None or legacy.evaluation_key is not None:
        return None
    crowned = ctx.store.get(legacy.run_id)
    try:
        same = crowned is not None and champion.line(crowned.run_config()) == champion.line(cfg)
    except Unreadable:
        same = False
    if not same:
        log.info("champions/%s.json: not this line's champion (evaluated another way); not adopted", cfg.name)
        return None
    return legacy.model_copy(update={"evaluation_key": champion.evaluation_key(cfg), "generation": 0})
