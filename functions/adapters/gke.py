"""GKE adapter: the Autopilot cluster with the Ray operator add-on (google-cloud-container) and the
Platform interface on top of it, through the Kubernetes API of that cluster (functions/kube.py)."""

from __future__ import annotations

import base64
import tempfile
import threading
from typing import Any

from functions.adapters.google_api import translate
from functions.adapters.kube import Kube, WorkerGroup, api_client
from functions.adapters.retry import with_retries
from functions.core import errors, manifests
from functions.core.config import ClusterSpec, RunConfig
from functions.core.platform import ClusterReadiness, Workers

# The API server answers in these states; RECONCILING and DEGRADED clusters still take work.
READY = {"RUNNING", "RECONCILING", "DEGRADED"}
BROKEN = {"ERROR", "STOPPING"}


def autopilot_cluster(spec: ClusterSpec) -> dict:
    """The cluster the recipe creates by hand: Autopilot, Ray operator with logging and monitoring."""
    return {
        "name": spec.gke_cluster,
        "autopilot": {"enabled": True},
        "release_channel": {"channel": "REGULAR"},
        "addons_config": {"ray_operator_config": RAY_OPERATOR},
        "resource_labels": {"managed-by": "raytune"},
    }


RAY_OPERATOR = {
    "enabled": True,
    "ray_cluster_logging_config": {"enabled": True},
    "ray_cluster_monitoring_config": {"enabled": True},
}


class GkeClusters:
    """Finds or creates clusters; never blocks on an operation (Cloud Functions time out)."""

    def __init__(self, project: str, client=None):
        self.project = project
        self._client = client

    @property
    def client(self):
        if self._client is None:
            from google.cloud import container_v1

            self._client = container_v1.ClusterManagerClient()
        return self._client

    def _path(self, spec: ClusterSpec) -> str:
        return f"projects/{self.project}/locations/{spec.region}/clusters/{spec.gke_cluster}"

    def _retried(self, call: Any, what: str) -> Any:
        return with_retries(call, what, translate=translate)

    def get(self, spec: ClusterSpec) -> Any:
        try:
            return self._retried(lambda: self.client.get_cluster(name=self._path(spec)), f"get {self._path(spec)}")
        except errors.NotFound:
            return None

    def ensure(self, spec: ClusterSpec) -> tuple[ClusterReadiness, Any]:
        cluster = self.get(spec)
        if cluster is None:
            parent = f"projects/{self.project}/locations/{spec.region}"
            try:
                self._retried(
                    lambda: self.client.create_cluster(parent=parent, cluster=autopilot_cluster(spec)),
                    f"create {self._path(spec)}",
                )
            except errors.Conflict:
                pass  # a concurrent launch started it
            return ClusterReadiness("provisioning", f"creating GKE Autopilot cluster {spec.gke_cluster}"), None
        status = cluster.status.name
        if status in BROKEN:
            return ClusterReadiness(
                "error", f"GKE cluster {spec.gke_cluster} is {status}: {cluster.status_message}"
            ), None
        if status not in READY:
            return ClusterReadiness("provisioning", f"GKE cluster {spec.gke_cluster} is {status}"), None
        if not cluster.addons_config.ray_operator_config.enabled:
            try:
                self._retried(
                    lambda: self.client.update_cluster(
                        name=self._path(spec), update={"desired_addons_config": {"ray_operator_config": RAY_OPERATOR}}
                    ),
                    f"enable Ray operator on {self._path(spec)}",
                )
            except errors.Conflict:
                pass  # another operation is running on the cluster; look again next tick
            return ClusterReadiness("provisioning", f"enabling the Ray operator add-on on {spec.gke_cluster}"), None
        return ClusterReadiness("ready"), cluster


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

    def __init__(self, project: str, hf_token: str | None, clusters: GkeClusters | None = None, kube_factory=None):
        self.clusters = clusters or GkeClusters(project)
        self.hf_token = hf_token
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

    def _connect(self, cfg: RunConfig, cluster) -> Kube:
        key = f"{cfg.cluster.region}/{cfg.cluster.gke_cluster}"
        with self._lock:
            if key not in self._kubes:
                self._kubes[key] = self._kube_factory(cluster)
            return self._kubes[key]

    def _kube(self, cfg: RunConfig) -> Kube:
        key = f"{cfg.cluster.region}/{cfg.cluster.gke_cluster}"
        with self._lock:
            if key in self._kubes:
                return self._kubes[key]
        readiness, cluster = self.clusters.ensure(cfg.cluster)
        if readiness.state != "ready":
            raise RuntimeError(f"cluster {key} not ready: {readiness.message}")
        return self._connect(cfg, cluster)

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        readiness, cluster = self.clusters.ensure(cfg.cluster)
        if readiness.state == "ready":
            self._connect(cfg, cluster)  # the cluster as just read: no second lookup to reach its API
        return readiness

    def submit(self, cfg: RunConfig, run_id: str, worker_replicas: int, env: dict[str, str]) -> None:
        from trainer.codehash import code_files, code_sha256

        kube = self._kube(cfg)
        if self.hf_token:
            kube.apply(manifests.secret(cfg, self.hf_token))
        files = code_files()
        for obj in manifests.run_objects(cfg, run_id, files, code_sha256(files), worker_replicas, env):
            kube.apply(obj)

    def job_status(self, cfg: RunConfig, run_id: str) -> dict | None:
        job = self._kube(cfg).get_rayjob(cfg.cluster.namespace, run_id)
        return None if job is None else job.get("status", {})

    def stop(self, cfg: RunConfig, run_id: str) -> None:
        self._kube(cfg).delete_rayjob(cfg.cluster.namespace, run_id)

    def workers(self, cfg: RunConfig) -> Workers | None:
        group = self._kube(cfg).worker_group(cfg.cluster.namespace, cfg.cluster.ray_cluster, manifests.GPU_GROUP)
        return None if group is None else Workers(group.replicas, group)

    def scale(self, cfg: RunConfig, workers: Workers, replicas: int) -> bool:
        assert isinstance(workers.handle, WorkerGroup)
        return self._kube(cfg).scale_worker_group(
            cfg.cluster.namespace, cfg.cluster.ray_cluster, manifests.GPU_GROUP, workers.handle, replicas
        )
