"""GKE adapter: the Platform interface on GKE, through the Kubernetes API of the run's Autopilot cluster
(functions/adapters/kube.py); the cluster itself is functions/adapters/gke_clusters.py's."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import tempfile
import threading
from collections.abc import Callable
from typing import TypeVar

from functions.adapters.gke_clusters import READY, GkeClusters
from functions.adapters.kube import Kube, RayClusterSeen, api_client
from functions.core import capacity, disruption, errors, kuberay_lag, kubetime, manifests, stuck
from functions.core.allocation import group_name
from functions.core.config import ClusterSpec, RunConfig
from functions.core.platform import AttemptSpan, ClusterReadiness, NodeSeen, RayObject, Waiting, Workers

JOB_ENDED = {"SUCCEEDED", "FAILED", "STOPPED"}

T = TypeVar("T")


# A new RayCluster's pods not yet on a node whose Events are read at a sizing (the autoscaler's word on capacity).
HELD_EVENT_READS = 8


class _Credentials:
    """Google access tokens for the cluster's API server, refreshed when they expire (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._credentials = None

    def token(self) -> str:
        import google.auth
        import google.auth.transport.requests

        with self._lock:
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            if not self._credentials.valid:
                self._credentials.refresh(google.auth.transport.requests.Request())
            return str(self._credentials.token)

    def refresh(self) -> None:
        """Forget the token: the API server refused it (revoked, rotated), so the next call gets a new one."""
        with self._lock:
            if self._credentials is not None:
                self._credentials.token = None
                self._credentials.expiry = None


class GkePlatform:
    """Platform on GKE: RayCluster and RayJob objects applied to the run's Autopilot cluster."""

    def __init__(
        self,
        project: str,
        hf_token: str | None,
        clusters: GkeClusters | None = None,
        kube_factory=None,
        owner: str | None = None,
        credentials: dict[str, str] | None = None,
    ):
        """`owner`: the deployment's label value (manifests.owner_id of its runs bucket); only objects carrying
        it are swept. None (the CLI): reads only."""
        self.owner = owner
        self.clusters = clusters or GkeClusters(project)
        self.hf_token = hf_token
        self.credentials = credentials or {}  # the tracking destinations' (never logged or stored)
        self._kube_factory = kube_factory or self._kube_for
        self._kubes: dict[str, Kube] = {}
        self._lock = threading.Lock()
        self._credentials = _Credentials()

    def _kube_for(self, cluster) -> Kube:
        """The cluster's API server: its endpoint, its CA, our Google access token."""
        ca = tempfile.NamedTemporaryFile(prefix="gke-ca-", suffix=".pem", delete=False)  # noqa: SIM115 - kept for the client
        ca.write(base64.b64decode(cluster.master_auth.cluster_ca_certificate))
        ca.close()
        return Kube(
            api_client(f"https://{cluster.endpoint}", token=self._credentials.token, ca_file=ca.name),
            on_unauthorized=self._credentials.refresh,
        )

    def _connect(self, spec: ClusterSpec, cluster) -> Kube:
        key = f"{spec.region}/{spec.gke_cluster}"
        with self._lock:
            if key not in self._kubes:
                self._kubes[key] = self._kube_factory(cluster)
            return self._kubes[key]

    def reachable(self, spec: ClusterSpec) -> Kube | None:
        """The cluster's API when the GKE cluster exists and answers; None otherwise. Never creates one:
        only ensure_cluster does, for a run that needs it."""
        key = f"{spec.region}/{spec.gke_cluster}"
        with self._lock:
            if key in self._kubes:
                return self._kubes[key]
        cluster = self.clusters.get(spec)
        if cluster is None or cluster.status.name not in READY:
            return None
        return self._connect(spec, cluster)

    def _kube(self, spec: ClusterSpec) -> Kube:
        kube = self.reachable(spec)
        if kube is None:
            self._gone_or(spec, errors.TransientError(f"GKE cluster {spec.region}/{spec.gke_cluster} is not ready"))
        assert kube is not None
        return kube

    def _gone_or(self, spec: ClusterSpec, error: Exception) -> None:
        """Raise ClusterGone when GKE says the cluster does not exist (its cached API client forgotten), else
        `error`: a cluster that is there but not answering is an outage, retried."""
        if self.clusters.get(spec) is None:
            with self._lock:
                self._kubes.pop(f"{spec.region}/{spec.gke_cluster}", None)
            raise errors.ClusterGone(f"GKE cluster {spec.gke_cluster} in {spec.region} does not exist (deleted?)")
        raise error

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        readiness, cluster = self.clusters.ensure(cfg.cluster)
        if readiness.state == "ready":
            self._connect(cfg.cluster, cluster)  # the cluster as just read: no second lookup to reach its API
        return readiness

    def _asked(self, spec: ClusterSpec, kube: Kube, ask: Callable[[Kube], T]) -> T:
        """A question for the cluster's API through its (cached) client; when it does not answer, GKE is asked
        whether the cluster still exists: one deleted meanwhile is ClusterGone (its client dropped, so a later
        cluster of the same name is reached afresh), not an outage retried on every tick."""
        try:
            return ask(kube)
        except errors.TransientError as exc:
            self._gone_or(spec, exc)
            raise

    def workers(self, spec: ClusterSpec, listed: object = None) -> Workers | None:
        kube = self.reachable(spec)
        if kube is None:
            return None  # no GKE cluster, no RayCluster
        return self._asked(spec, kube, lambda kube: self._workers(kube, spec, listed))

    def _workers(self, kube: Kube, spec: ClusterSpec, listed: object = None) -> Workers | None:
        seen = listed if isinstance(listed, RayClusterSeen) else kube.worker_groups(spec.namespace, spec.ray_cluster)
        if seen is None:
            return None
        groups = {g["groupName"]: int(g.get("replicas") or 0) for g in seen.groups}
        # A group at zero leaves the spec only once KubeRay has deleted its pods (it reconciles only the groups
        # in the spec): one pod listing per such group, and only while one exists.
        drained = frozenset(
            name
            for name, replicas in groups.items()
            if replicas == 0 and not kube.pods(spec.namespace, f"ray.io/cluster={spec.ray_cluster},ray.io/group={name}")
        )
        # Another deployment's (its label names another runs bucket) is not ours; one made before the label
        # existed (managed-by only) is ours to write, and to label once every group in it is accounted for
        # (allocation.foreign): the groups its pod templates name runs for say whose they are.
        ours = seen.managed and seen.owner in (None, self.owner)
        runs = {
            g["groupName"]: run
            for g in seen.groups
            if (run := ((g.get("template") or {}).get("metadata") or {}).get("labels", {}).get(manifests.RUN_LABEL))
        }
        labelled = seen.owner is not None or self.owner is None
        head_ready, group_pods = False, dict[str, kuberay_lag.GroupPods]()
        if not seen.ready:  # a new RayCluster's pods, read only until KubeRay calls it ready
            pods = kube.pods(spec.namespace, f"ray.io/cluster={spec.ray_cluster}")
            waiting = kuberay_lag.unscheduled(pods)[:HELD_EVENT_READS]
            head_ready, group_pods = kuberay_lag.pods_ready(pods, {n: kube.events(spec.namespace, n) for n in waiting})
        return Workers(groups, seen.stamp, seen, ours, drained, labelled, runs, seen.ready, head_ready, group_pods)

    @functools.cached_property
    def code(self) -> tuple[dict[str, bytes], str]:
        """The trainer code this process ships and its fingerprint: read once, used by every submission."""
        from trainer.codehash import code_files, code_sha256

        files = code_files()
        return files, code_sha256(files)

    def code_sha256(self) -> str:
        return self.code[1]

    def size(self, cfg: RunConfig, run_id: str, workers: Workers | None, groups: dict[str, int], stamp: int) -> bool:
        kube = self._kube(cfg.cluster)
        seen = workers.handle if workers is not None else None
        assert seen is None or isinstance(seen, RayClusterSeen)
        files, code_hash = self.code
        objects = manifests.assemble(
            cfg,
            run_id,
            files,
            code_hash,
            groups=groups,
            seen=seen.groups if seen else (),
            stamp=stamp,
            owner=self.owner,
            hf_token=self.hf_token,
            credentials=self.credentials,
        )
        for part in objects.before_cluster():
            kube.apply(part)
        cluster = objects.cluster
        if seen is None:
            return kube.create(cluster)
        if seen.base == cluster["metadata"]["annotations"][manifests.BASE_ANNOTATION]:
            # The head, labels and versions as this launch would apply them: only the groups change.
            specs = cluster["spec"]["workerGroupSpecs"]
            return kube.set_worker_groups(cfg.cluster.namespace, cfg.cluster.ray_cluster, seen, specs, stamp)
        return kube.apply(cluster, resource_version=seen.resource_version)

    def scale(
        self, spec: ClusterSpec, workers: Workers, groups: dict[str, int], stamp: int, adopt: bool = False
    ) -> bool:
        seen = workers.handle
        assert isinstance(seen, RayClusterSeen)
        specs = manifests.worker_groups(groups, seen.groups)
        label = self.owner if adopt else None
        return self._kube(spec).set_worker_groups(spec.namespace, spec.ray_cluster, seen, specs, stamp, label=label)

    def delete_cluster(self, spec: ClusterSpec, workers: Workers) -> bool:
        assert isinstance(workers.handle, RayClusterSeen)
        return self._kube(spec).delete_raycluster(spec.namespace, spec.ray_cluster, workers.handle.resource_version)

    def submit(self, cfg: RunConfig, run_id: str, job: str, env: dict[str, str]) -> None:
        # The assembly's RayJob part alone: the rest was applied when the cluster was sized.
        self._kube(cfg.cluster).apply(manifests.ray_job(cfg, run_id, self.code[1], env, owner=self.owner, job=job))

    def job_status(self, cfg: RunConfig, job: str) -> dict | None:
        """The RayJob's status; ClusterGone when its GKE cluster was deleted (its API server unreachable)."""
        spec = cfg.cluster
        found = self._asked(spec, self._kube(spec), lambda kube: kube.get_rayjob(spec.namespace, job))
        return None if found is None else found.get("status", {})

    def waiting_for(self, cfg: RunConfig, run_id: str) -> Waiting:
        kube = self._kube(cfg.cluster)
        namespace, group = cfg.cluster.namespace, group_name(run_id)
        pods = stuck.own_pods(kube.pods(namespace, f"ray.io/cluster={cfg.cluster.ray_cluster}"), group)
        pending = [p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
        why = stuck.explain(pods, {name: kube.events(namespace, name) for name in pending[:4]})
        return Waiting(why, stuck.bound(pods, group))

    def status_lag(self, spec: ClusterSpec, now: dt.datetime) -> str | None:
        kube = self._kube(spec)
        cluster = kube.raycluster(spec.namespace, spec.ray_cluster)
        pods = kube.pods(spec.namespace, f"ray.io/cluster={spec.ray_cluster}") if cluster else []
        return kuberay_lag.lag(cluster, pods, now)

    def ask_status(self, spec: ClusterSpec, now: dt.datetime) -> None:
        kube = self._kube(spec)
        if (cluster := kube.raycluster(spec.namespace, spec.ray_cluster)) is not None:
            kube.patch_raycluster(spec.namespace, spec.ray_cluster, kuberay_lag.ask(cluster, now), "ask KubeRay again")

    def job_log(self, cfg: RunConfig, job: str, limit: int | None = None) -> str:
        return self._kube(cfg.cluster).job_log(cfg.cluster.namespace, job, limit)

    def disruptions(self, cfg: RunConfig, run_id: str, span: AttemptSpan) -> list[str]:
        kube = self._kube(cfg.cluster)
        namespace = cfg.cluster.namespace
        pods = kube.pods(namespace, f"{manifests.RUN_LABEL}={run_id}")
        # KubeRay names a group's pods <cluster>-<group>-worker-<suffix>; the replaced ones are gone, their Events stay
        # (while the recorder's budget for the object lasts: disruption's docstring).
        group = group_name(run_id)
        events = [e for e in kube.events(namespace) if f"-{group}-" in (e.get("involvedObject") or {}).get("name", "")]
        found = disruption.from_pods(pods, events, span.since)
        found += disruption.from_kuberay(kube.events(namespace, cfg.cluster.ray_cluster), group, span.since)
        recorded = dict(span.nodes)
        return found + disruption.node_changes(recorded, {name: kube.node(name) for name in recorded}, span.until)

    def worker_nodes(self, cfg: RunConfig, run_id: str) -> dict[str, NodeSeen]:
        kube = self._kube(cfg.cluster)
        pods = kube.pods(cfg.cluster.namespace, f"{manifests.RUN_LABEL}={run_id}")
        found = {}
        for name in sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))}):
            node = kube.node(name)
            if node is not None:
                labels = (node.get("metadata") or {}).get("labels") or {}
                found[name] = NodeSeen(capacity.node_capacity(labels), disruption.identity(node))
        return found

    def stop(self, spec: ClusterSpec, job: str) -> None:
        self._kube(spec).delete_rayjob(spec.namespace, job)

    def stop_waiting(self, spec: ClusterSpec, job: str, run_id: str) -> str | None:
        kube = self._kube(spec)
        found = kube.get_rayjob(spec.namespace, job)
        if found is None:
            return None
        status = (found.get("status") or {}).get("jobStatus") or None
        if status not in (None, "PENDING"):
            return f"its job is {status} now"
        pods = kube.pods(spec.namespace, f"ray.io/cluster={spec.ray_cluster}")
        if stuck.bound(pods, group_name(run_id)):
            return "a worker pod of its run is bound to a node now"
        if not kube.delete_rayjob(spec.namespace, job, resource_version=found["metadata"]["resourceVersion"]):
            return "its job changed as it was to be stopped"
        return None

    def ray_objects(self, spec: ClusterSpec) -> list[RayObject]:
        kube = self.reachable(spec)
        if kube is None or self.owner is None:
            return []
        return self._asked(spec, kube, lambda kube: self._ray_objects(kube, spec))

    def _ray_objects(self, kube: Kube, spec: ClusterSpec) -> list[RayObject]:
        assert self.owner is not None
        labels = manifests.ownership(self.owner)
        found = [
            RayObject(
                "RayJob",
                job["metadata"]["name"],
                job.get("status", {}).get("jobStatus") not in JOB_ENDED,
                _created(job),
                (job["metadata"].get("labels") or {}).get(manifests.RUN_LABEL),
                job.get("status", {}),
            )
            for job in kube.owned(spec.namespace, "RayJob", labels)
        ]
        for cluster in kube.ray_clusters(spec.namespace, labels):
            listed = RayClusterSeen.of(cluster)
            active = any(g.get("replicas") for g in listed.groups)
            found.append(RayObject("RayCluster", cluster["metadata"]["name"], active, _created(cluster), handle=listed))
        return found


def _created(obj: dict) -> dt.datetime | None:
    return kubetime.parsed(obj["metadata"].get("creationTimestamp"))
