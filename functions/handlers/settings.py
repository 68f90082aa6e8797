"""Controller settings, read once from the environment (Terraform sets them on each function)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    project: str
    bucket: str  # run records (runs/) and default checkpoints (checkpoints/)
    watch_topic: str | None  # full topic path; the trainer's completion notice goes here
    events_topic: str | None  # full topic path; run-finished events for other systems
    max_event_age_s: int  # older deliveries are recorded as rejected, not launched
    hf_token: str | None  # bound from Secret Manager; never logged or stored
    checkpoints: str | None = None  # where runs without a storage_path keep checkpoints
    node_hour_price: float | None = None  # a GPU node's price per hour, for each run's cost

    @property
    def default_storage(self) -> str:
        return self.checkpoints or f"gs://{self.bucket}/checkpoints"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        missing = [name for name in ("RAYTUNE_PROJECT", "RAYTUNE_BUCKET") if not env.get(name)]
        if missing:
            raise RuntimeError(f"missing environment: {', '.join(missing)}")
        return cls(
            project=env["RAYTUNE_PROJECT"],
            bucket=env["RAYTUNE_BUCKET"],
            watch_topic=env.get("RAYTUNE_WATCH_TOPIC") or None,
            events_topic=env.get("RAYTUNE_EVENTS_TOPIC") or None,
            max_event_age_s=int(env.get("RAYTUNE_MAX_EVENT_AGE_S", 12 * 3600)),
            hf_token=env.get("HF_TOKEN") or None,
            checkpoints=env.get("RAYTUNE_CHECKPOINTS") or None,
            node_hour_price=float(env["RAYTUNE_NODE_HOUR_PRICE"]) if env.get("RAYTUNE_NODE_HOUR_PRICE") else None,
        )
