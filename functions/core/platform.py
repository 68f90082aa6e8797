"""What the handlers need from wherever Ray runs: GKE + KubeRay (functions/adapters/gke.py) or the embedded
local default (functions/local/platform.py). Handlers only speak this interface."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from functions.core.config import ClusterSpec, RunConfig
from functions.core.kuberay_lag import GroupPods


@dataclass(frozen=True)
class ClusterReadiness:
    state: Literal["ready", "provisioning", "error"]
    message: str = ""


@dataclass(frozen=True)
class AttemptSpan:
    """An attempt, as the question "what took its nodes?" needs it: from its submission (`since`; None: all that
    is remembered) to its job's end (`until`; None: still running), on the nodes it was seen running on, each with
    its identity then (NodeSeen.identity)."""

    since: dt.datetime | None = None
    nodes: Mapping[str, str] = field(default_factory=dict)
    until: dt.datetime | None = None


@dataclass(frozen=True)
class Workers:
    groups: dict[str, int]  # worker group -> replicas: one group per run holding nodes (allocation.group_name)
    stamp: int  # the allocation version the groups were last sized for (0: never stamped)
    handle: object  # the RayCluster as read, given back to size()/scale()/delete_cluster() as their precondition
    managed: bool = True  # labelled as the controller's; another team's RayCluster of that name is never changed
    drained: frozenset[str] = frozenset()  # groups at zero with no pods left
    labelled: bool = True  # carries this deployment's own label (False: made before deployments were labelled)
    runs: Mapping[str, str] = field(default_factory=dict)  # group -> the run its pod template names, where it does
    ready: bool = True  # KubeRay has called the RayCluster ready (it never takes that back): jobs are submitted
    # Of a RayCluster never yet ready, read from its pods: whether its head is ready, and each group's pods
    # (kuberay_lag.held: what allocation.sizing holds at zero until KubeRay calls it ready)
    head_ready: bool = False
    group_pods: Mapping[str, GroupPods] = field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return sum(self.groups.values())


@dataclass(frozen=True)
class Waiting:
    """Why a run's job waits (None: nothing is wrong that its pods show), and whether its capacity came: a worker pod
    of the run bound to a node."""

    reason: str | None = None
    bound: bool = False


@dataclass(frozen=True)
class NodeSeen:
    """A node a run's workers run on, as the watcher first saw it there."""

    capacity: str  # where it came from (computeclass.node_capacity): spot, reservation, ...
    identity: str = ""  # disruption.identity: a node made again or booted again under its name has another


@dataclass(frozen=True)
class RayObject:
    """A RayJob or RayCluster carrying this deployment's labels, as one listing of the namespace found it: every
    tick's runs read their job statuses from it, and the leak sweep judges it."""

    kind: Literal["RayJob", "RayCluster"]
    name: str
    active: bool  # a job not ended / a cluster with worker nodes
    created: dt.datetime | None = None  # its creationTimestamp: young objects get a grace period
    run_id: str | None = None  # a RayJob's run (its label): a retried run's later attempts have names of their own
    status: dict[str, Any] | None = None  # a RayJob's status as listed: the tick's runs read theirs from here
    handle: object = None  # a RayCluster as listed, which workers() takes instead of reading it again


class Platform(Protocol):
    def code_sha256(self) -> str:
        """The fingerprint of the trainer code this platform ships to its jobs."""

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        """Ready, or creation/repair started (never waits for it)."""

    def workers(self, spec: ClusterSpec, listed: object = None) -> Workers | None:
        """The RayCluster's worker groups as they stand; None when there is no RayCluster. `listed`: its
        RayObject.handle from a listing, taken as read (the caller judges whether it is recent enough)."""

    def size(self, cfg: RunConfig, run_id: str, workers: Workers | None, groups: dict[str, int], stamp: int) -> bool:
        """Apply the code, the Secret and the RayCluster with these worker groups, stamped (the run's own group
        rendered from `cfg`, the others as read): created when `workers` is None, else only if unchanged since
        `workers` was read. False when it changed (or was created) meanwhile."""

    def scale(
        self, spec: ClusterSpec, workers: Workers, groups: dict[str, int], stamp: int, adopt: bool = False
    ) -> bool:
        """Resize existing worker groups (and drop those left out), stamped, if unchanged since read; False when
        it changed meanwhile. `adopt`: also label it as this deployment's (allocation.adoptable)."""

    def delete_cluster(self, spec: ClusterSpec, workers: Workers) -> bool:
        """Delete the RayCluster if unchanged since read; False when it changed meanwhile."""

    def submit(self, cfg: RunConfig, run_id: str, job: str, env: dict[str, str]) -> None:
        """Apply job `job` of the run (one per attempt: runs.job_name) to its (sized) RayCluster; idempotent."""

    def job_status(self, cfg: RunConfig, job: str) -> dict[str, Any] | None:
        """The job's status in RayJob terms (jobStatus, jobDeploymentStatus, reason, message, ...); None if gone."""

    def disruptions(self, cfg: RunConfig, run_id: str, span: AttemptSpan) -> list[str]:
        """What took the run's worker nodes away during the attempt (preemption, a node shut down or gone, an
        eviction), one line each naming the node and when, as Kubernetes (or the local cluster) says it; [] when
        nothing did. The nodes it was seen running on that are gone, made again or booted again since, or no longer
        Ready before its job ended, are lost too."""

    def job_log(self, cfg: RunConfig, job: str, limit: int | None = None) -> str:
        """The job's driver log so far ('' when there is none yet or any more); given `limit`, its last `limit`
        bytes at most (from a line's start: joblog.tail), read without ever holding the whole of a longer one."""

    def waiting_for(self, cfg: RunConfig, run_id: str) -> Waiting:
        """Why a submitted job still waits, from the run's own pods (the head and its worker group, never another
        run's group) and their Events, and whether one of its worker pods is bound to a node."""

    def status_lag(self, spec: ClusterSpec, now: dt.datetime) -> str | None:
        """Why KubeRay should be asked to look at the RayCluster again: its status lags its pods
        (functions/core/kuberay_lag.py); None when it does not, or there is no KubeRay."""

    def ask_status(self, spec: ClusterSpec, now: dt.datetime) -> None:
        """Ask KubeRay to reconcile the RayCluster now (an annotation it is triggered by); nothing when it is gone."""

    def worker_nodes(self, cfg: RunConfig, run_id: str) -> dict[str, NodeSeen]:
        """The nodes the run's workers run on, each with the capacity it came from and its identity."""

    def stop(self, spec: ClusterSpec, job: str) -> None: ...

    def stop_waiting(self, spec: ClusterSpec, job: str, run_id: str) -> str | None:
        """Stop the job only if, read right now, it still waits and no worker pod of its run is bound to a node, with
        the job as read for a precondition; None when stopped (or gone), else why not."""

    def ray_objects(self, spec: ClusterSpec) -> list[RayObject]:
        """The RayJobs and RayClusters with this deployment's labels in the cluster's namespace (a list call of
        each kind): where a tick reads its runs' job statuses from, and what the leak sweep judges."""
