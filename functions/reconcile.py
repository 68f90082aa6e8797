"""Pure decisions of the watcher: what a RayJob status means for a run, and how many GPU worker
nodes a RayCluster still needs. No I/O here."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from functions.config import RunConfig
from functions.runs import RunRecord, State

JOB_TERMINAL = {"STOPPED", "SUCCEEDED", "FAILED"}
DEPLOYMENT_TERMINAL = {"Complete", "Failed", "ValidationFailed"}
WAITING = {None, "", "PENDING"}


@dataclass(frozen=True)
class Outcome:
    state: State
    reason: str | None = None


def job_outcome(record: RunRecord, status: dict | None, now: dt.datetime, pending_seconds: int) -> Outcome:
    """Map a RayJob status onto the run's state.

    KubeRay bugs handled: jobStatus can stay RUNNING while jobDeploymentStatus is Failed, and jobs can
    hang in Initializing/PENDING: either terminal field ends the run, and waiting has a deadline.
    """
    if status is None:
        return Outcome(State.FAILED, "the RayJob disappeared before it finished")
    job = status.get("jobStatus") or None
    deployment = status.get("jobDeploymentStatus") or None
    detail = "; ".join(str(status[k]) for k in ("reason", "message") if status.get(k)) or None
    if job == "SUCCEEDED":
        return Outcome(State.SUCCEEDED, detail)
    if job == "STOPPED":
        if record.cancel_requested:
            return Outcome(State.CANCELLED, "cancelled on request")
        return Outcome(State.FAILED, detail or "the Ray job was stopped")
    if job == "FAILED" or deployment in DEPLOYMENT_TERMINAL:
        return Outcome(State.FAILED, detail or f"jobStatus {job}, jobDeploymentStatus {deployment}")
    if job == "RUNNING":
        return Outcome(State.RUNNING)
    submitted = next((t.at for t in reversed(record.history) if t.state == State.SUBMITTED), record.created_at)
    waited = (now - submitted).total_seconds()
    if job in WAITING and waited > pending_seconds:
        return Outcome(State.FAILED, f"still {deployment or job or 'pending'} after {int(waited)}s "
                                     f"(deadlines.pending_seconds {pending_seconds})")
    return Outcome(record.state)


def cluster_key(cfg: RunConfig) -> tuple[str, str, str, str]:
    c = cfg.cluster
    return (c.region, c.gke_cluster, c.namespace, c.ray_cluster)


def gpu_demand(records: list[RunRecord], key: tuple[str, str, str, str]) -> int:
    """Worker nodes the RayCluster must keep: the largest live run on it (runs queue on Ray's resources),
    0 when none is live."""
    live = [RunConfig.model_validate(r.config) for r in records if not r.state.terminal and r.config]
    return max((cfg.scaling.nodes for cfg in live if cluster_key(cfg) == key), default=0)
