"""What the handlers need from wherever Ray runs: GKE + KubeRay (functions/gke.py) or the embedded
local default (functions/local.py). Handlers only speak this interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from functions.core.config import RunConfig


@dataclass(frozen=True)
class ClusterReadiness:
    state: Literal["ready", "provisioning", "error"]
    message: str = ""


@dataclass(frozen=True)
class Workers:
    replicas: int
    handle: object  # the group as read, given back to scale() as its precondition


class Platform(Protocol):
    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        """Ready, or creation/repair started (never waits for it)."""

    def submit(self, cfg: RunConfig, run_id: str, worker_replicas: int, env: dict[str, str]) -> None:
        """Apply the code, the RayCluster (with this many workers) and the run's job; idempotent."""

    def job_status(self, cfg: RunConfig, run_id: str) -> dict[str, Any] | None:
        """The job's status in RayJob terms (jobStatus, jobDeploymentStatus, reason, message, ...); None if gone."""

    def stop(self, cfg: RunConfig, run_id: str) -> None: ...

    def workers(self, cfg: RunConfig) -> Workers | None:
        """The GPU worker group as it stands; None when there is no cluster."""

    def scale(self, cfg: RunConfig, workers: Workers, replicas: int) -> bool:
        """Scale the worker group if it is still as read; False when it changed meanwhile."""
