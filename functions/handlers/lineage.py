"""The line of adapters of a config name: what its last successful nightly trained on (so an unchanged
night is skipped) and which adapter is its champion (so a better one takes over). Both are pointers in
the bucket, moved only by compare-and-swap; the decisions are functions/core/fingerprint.py and
functions/core/champion.py."""

from __future__ import annotations

import datetime as dt
import json
import logging

from functions.adapters import datasets, hub_tags, registry, vertex_registry
from functions.adapters.store import RunStore
from functions.core import champion, fingerprint, tracking
from functions.core.champion import Champion, Promotion
from functions.core.config import RunConfig
from functions.core.errors import Unreadable, describe
from functions.core.fingerprint import Inputs, LastTrained
from functions.core.result import CHAMPION_ENV, RunResult
from functions.core.runs import RunRecord
from functions.core.secrets import redact
from functions.handlers.context import Context, champion_pointers

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
    champion_run = promotion.champion_run_id
    if champion_run is None:
        return promotion
    if champion_run == record.run_id:
        adapter = record.result.adapter_path if record.result else None
        pushed = record.result
    else:
        current = ctx.champions.get(champion.line(cfg))
        adapter = current.adapter_path if current is not None and current.run_id == champion_run else None
        # Only the Hub (its commit) and Vertex AI (its merged model) need more of the champion than its pointer.
        needs = cfg.export.hub_repo or (cfg.tracking and cfg.tracking.vertex and cfg.tracking.vertex.serving_image)
        earlier = ctx.store.get(champion_run) if needs else None
        pushed = earlier.result if earlier is not None else None
    aliased = Aliased(cfg, record.result, ctx.settings.hf_token, ctx.settings.project)
    registered, error = aliased.move(champion_run, adapter, pushed)
    return promotion.model_copy(update={"registered": registered, "registry_error": error})


class Aliased:
    """Where a line's `champion` alias is: MLflow's Model Registry (a tracked line), the Vertex AI Model Registry
    (a line tracked in Vertex AI with a serving image) and the Hub (a line that pushes to `export.hub_repo`: a tag
    on the champion's commit). `result`: the deciding run's, whose tracked run names the MLflow server when the
    config names none (a local store); `project`: the deployment's, Vertex AI's where the config names none."""

    def __init__(
        self, cfg: RunConfig, result: RunResult | None, hf_token: str | None, project: str | None = None
    ) -> None:
        self.cfg, self.result, self.hf_token, self.project = cfg, result, hf_token, project

    def move(self, run: str, adapter: str | None, pushed: RunResult | None) -> tuple[str | None, str | None]:
        """The alias moved to `run` in each place the line keeps one: (what each points at now, why any could
        not be moved); (None, None) where there is nothing to move."""
        said, errors = [], []
        moves = (
            ("mlflow", lambda: self._mlflow(run, adapter)),
            ("vertex", lambda: self._vertex(run, pushed)),
            ("hub", lambda: self._hub(run, pushed)),
        )
        for place, move in moves:
            try:
                now = move()
            except Exception as exc:
                log.warning("%s: the champion alias not moved in %s: %s", run, place, redact(describe(exc)))
                errors.append(f"{place}: {redact(describe(exc, 300))}")
                continue
            if now:
                said.append(now)
        return "; ".join(said) or None, "; ".join(errors) or None

    def _mlflow(self, run: str, adapter: str | None) -> str | None:
        spec = self.cfg.tracking.mlflow if self.cfg.tracking else None
        tracked = self.result.tracking.get("mlflow") if self.result else None
        uri = (spec.uri if spec else None) or (tracked.uri if tracked else None)
        if self.cfg.tracking is None or spec is None or uri is None or not adapter:
            return None
        model = tracking.registered_model(spec, self.cfg.name)
        experiment = tracking.experiment_name(self.cfg.tracking, self.cfg.name)
        version = registry.move_champion(uri, model, experiment, run, adapter)
        return f"mlflow model {model} version {version}"

    def _vertex(self, run: str, pushed: RunResult | None) -> str | None:
        vertex = self.cfg.tracking.vertex if self.cfg.tracking else None
        if vertex is None or not vertex.serving_image or pushed is None:
            return None
        # A version names its model in Cloud Storage: the merged model where the run exported one, else the adapter.
        artifact = next((p for p in (pushed.merged_path, pushed.adapter_path) if p and p.startswith("gs://")), None)
        if artifact is None:
            raise ValueError("a Vertex AI model version needs its model in Cloud Storage (gs://); this run's is not")
        project = vertex.project or self.project
        if not project:
            raise ValueError("no project for the Vertex AI Model Registry: set tracking.vertex.project")
        place = vertex_registry.Place(project, vertex.location or self.cfg.cluster.region, vertex.endpoint)
        model = tracking.vertex_model(vertex, self.cfg.name)
        version = vertex_registry.move_champion(place, model, run, artifact, vertex.serving_image)
        return f"vertex model {model} version {version.rsplit('@', 1)[1]}"

    def _hub(self, run: str, pushed: RunResult | None) -> str | None:
        repo = self.cfg.export.hub_repo
        if not repo or pushed is None or not pushed.hub_revision or pushed.hub_repo != repo:
            return None
        commit = hub_tags.move_champion(repo, pushed.hub_revision, run, self.hf_token)
        return f"hub {repo} tag {tracking.CHAMPION_ALIAS} on {commit[:12]}"


def roll_back(
    store: RunStore, champion_run: str, now: dt.datetime, hf_token: str | None = None, project: str | None = None
) -> tuple[Champion, str]:
    """A person's rollback of the champion `champion_run`: its line's pointer goes back to the champion it
    replaced (compare-and-swap: refused if the line moved meanwhile), and the alias follows. Returns the champion
    now and what the registry said."""
    record = store.get(champion_run)
    if record is None:
        raise RuntimeError(f"no run {champion_run}")
    cfg = record.run_config()
    line = champion.line(cfg)
    champions = champion_pointers(store)
    current = champions.get(line)
    if current is None or current.run_id != champion_run:
        held = current.run_id if current else "none"
        raise RuntimeError(f"{champion_run} is not the champion of its line {line} (the champion is {held})")
    if not current.previous_run_id:
        raise RuntimeError(f"{champion_run} replaced no champion: there is none to roll back to")
    earlier = store.get(current.previous_run_id)
    if earlier is None or earlier.result is None:
        raise RuntimeError(f"{current.previous_run_id}, the champion before, has no record with a result")
    try:
        restored = champion.restored(current, earlier.run_id, earlier.result, now)
    except ValueError as err:
        raise RuntimeError(str(err)) from None

    def change(stored: Champion | None) -> Champion | None:
        if stored is None or stored.run_id != champion_run:
            raise RuntimeError(f"the champion of {line} changed meanwhile ({stored.run_id if stored else 'none'})")
        return restored

    now_stored = champions.swap(line, change) or restored
    registered, error = Aliased(cfg, earlier.result, hf_token, project).move(
        restored.run_id, restored.adapter_path, earlier.result
    )
    said = registered or (f"champion alias not moved: {error}" if error else "no tracked registry")
    log.info("%s: champion rolled back to %s (%s)", champion_run, restored.run_id, said)
    return now_stored, said


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
