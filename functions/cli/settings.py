"""Where the operator commands find the deployment: flags, then RAYTUNE_* environment variables, then one
small TOML file (`$RAYTUNE_CLI_CONFIG`, `./raytune.toml` or `~/.config/raytune/config.toml`; Terraform
writes it: `terraform output -raw cli_config > raytune.toml`). No cloud settings at all: the commands
work on the local workdir of `raytune local`."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from functions.core.config import RunConfig

ENV = {
    "project": "RAYTUNE_PROJECT",
    "region": "RAYTUNE_REGION",
    "runs_bucket": "RAYTUNE_BUCKET",
    "configs_bucket": "RAYTUNE_CONFIGS_BUCKET",
    "launch_topic": "RAYTUNE_LAUNCH_TOPIC",
    "watch_topic": "RAYTUNE_WATCH_TOPIC",
    "operator_key": "RAYTUNE_OPERATOR_KEY",
    "repository": "RAYTUNE_REPOSITORY",
    "image_repository": "RAYTUNE_IMAGE_REPOSITORY",
    "build_bucket": "RAYTUNE_BUILD_BUCKET",
    "image_build_service_account": "RAYTUNE_IMAGE_BUILD_SERVICE_ACCOUNT",
    "name": "RAYTUNE_DEPLOYMENT",
    "gke_cluster": "RAYTUNE_GKE_CLUSTER",
    "hf_token_secret": "RAYTUNE_HF_TOKEN_SECRET",
    "node_hour_price": "RAYTUNE_NODE_HOUR_PRICE",
    "node_hour_prices": "RAYTUNE_NODE_HOUR_PRICES",
    "price_currency": "RAYTUNE_PRICE_CURRENCY",
    "policy_reservation": "RAYTUNE_POLICY_RESERVATION",
    "policy_accelerator": "RAYTUNE_POLICY_ACCELERATOR",
    "policy_capacity": "RAYTUNE_POLICY_CAPACITY",
}


@dataclass(frozen=True)
class CliSettings:
    project: str | None = None
    region: str | None = None
    regions: str | None = None  # `raytune doctor`: JSON, every region with a cluster (region first)
    runs_bucket: str | None = None  # run records
    configs_bucket: str | None = None  # uploads launch runs
    launch_topic: str | None = None  # full topic path
    watch_topic: str | None = None  # full topic path (cancels)
    operator_key: str | None = None  # lets `cancel` stop runs of other sources
    repository: str | None = None  # `raytune image`: the Artifact Registry repository
    # `raytune image`: the repository's whole path, LOCATION-docker.pkg.dev/PROJECT/REPOSITORY (Terraform's
    # image_location: a region, or a multi-region every region's nodes pull from); named once, here
    image_repository: str | None = None
    build_bucket: str | None = None  # `raytune image`: where gcloud stages the source
    image_build_service_account: str | None = None  # `raytune image`: the build's identity (an email)
    name: str | None = None  # `raytune doctor`: Terraform's name, the prefix of what it made (default raytune)
    gke_cluster: str | None = None  # `raytune doctor`: the cluster configs run on
    hf_token_secret: str | None = None  # `raytune doctor`: the Secret Manager secret of the HF token
    node_hour_price: str | None = None  # estimates: a GPU node's price an hour (as the functions' own setting)
    node_hour_prices: str | None = None  # estimates: JSON, the price by capacity kind
    price_currency: str | None = None  # estimates: the prices' currency (Terraform's price_currency)
    # estimates: where the deployment's runs get their nodes (the operator's policy fixes them at launch)
    policy_reservation: str | None = None
    policy_accelerator: str | None = None
    policy_capacity: str | None = None  # JSON, the operator's default capacity list
    source: str = "defaults"  # where they came from, for error messages

    @property
    def cloud(self) -> bool:
        return bool(self.runs_bucket)

    def prices(self) -> dict[str, float]:
        """A node-hour's price by capacity kind, as the deployment charges runs (the one price for kinds not
        listed); a malformed setting is an error naming it."""
        try:
            by_kind = {k: float(v) for k, v in json.loads(self.node_hour_prices or "{}").items()}
            default = float(self.node_hour_price) if self.node_hour_price else None
        except (ValueError, TypeError, AttributeError) as err:
            raise RuntimeError(f"node_hour_price(s) in {self.source}: not a price ({err})") from None
        from functions.core.estimate import price_list

        return price_list(by_kind, default)

    def as_launched(self, cfg: RunConfig) -> RunConfig:
        """The config as the deployment's launch will run it: what the operator's policy fixes (its reservation,
        accelerator, default capacity list) filled in by the launch's own rule (Policy.fixed)."""
        from functions.handlers.settings import policy_from_env

        env = {
            ENV[name]: value
            for name in ("policy_reservation", "policy_accelerator", "policy_capacity")
            if (value := getattr(self, name))
        }
        try:
            return policy_from_env(env).fixed(cfg)
        except ValueError as err:
            raise RuntimeError(f"the policy settings in {self.source} are not the deployment's: {err}") from None

    def need(self, *names: str) -> None:
        missing = [n for n in names if not getattr(self, n)]
        if missing:
            flags = ", ".join(f"{ENV[n]} or {n} in raytune.toml" for n in missing)
            raise RuntimeError(f"missing setting: {flags} (from {self.source})")


def config_file(env: Mapping[str, str]) -> Path | None:
    for candidate in (env.get("RAYTUNE_CLI_CONFIG"), "raytune.toml", Path.home() / ".config/raytune/config.toml"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def load(flags: Mapping[str, str | None] | None = None, env: Mapping[str, str] = os.environ) -> CliSettings:
    values: dict[str, str] = {}
    sources = []
    path = config_file(env)
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise RuntimeError(f"{path}: not TOML: {err}") from None
        known = {f.name for f in fields(CliSettings)} - {"source"}
        if unknown := set(data) - known:
            raise RuntimeError(f"{path}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
        values.update({k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in data.items()})
        sources.append(str(path))
    from_env = {name: env[var] for name, var in ENV.items() if env.get(var)}
    if from_env:
        values.update(from_env)
        sources.append("environment")
    given = {k: v for k, v in (flags or {}).items() if v}
    if given:
        values.update(given)
        sources.append("flags")
    return CliSettings(**values, source=" + ".join(sources) or "defaults")
