"""The GKE cluster a run's RayCluster lives in: the Autopilot cluster Terraform makes (with the Ray operator
add-on), read and, where the deployment lets the functions create clusters, created or given the add-on, through
google-cloud-container; a cluster that is not ready yet is said as readiness, not raised."""

from __future__ import annotations

from typing import Any

from functions.adapters.google_api import translate
from functions.adapters.retry import with_retries
from functions.core import errors
from functions.core.config import ClusterSpec
from functions.core.platform import ClusterReadiness

# The API server answers in these states; RECONCILING and DEGRADED clusters still take work.
READY = {"RUNNING", "RECONCILING", "DEGRADED"}
BROKEN = {"ERROR", "STOPPING"}


# What Terraform's google provider (resource_container_cluster.go: expandNodeConfig, defaultOauthScopes) and
# gcloud (GKE_DEFAULT_SCOPES, "gke-default") send for nodes when none are given: devstorage.read_only is what
# pulls from Artifact Registry need, the rest Cloud Logging, Monitoring and Trace.
GKE_DEFAULT_SCOPES = (
    "https://www.googleapis.com/auth/devstorage.read_only",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/monitoring",
    "https://www.googleapis.com/auth/service.management.readonly",
    "https://www.googleapis.com/auth/servicecontrol",
    "https://www.googleapis.com/auth/trace.append",
)


def autopilot_cluster(spec: ClusterSpec, network: str = "default") -> dict:
    """The cluster Terraform creates (terraform/gke.tf): Autopilot, VPC-native, private nodes (egress through
    the network's Cloud NAT), the Ray operator with logging and monitoring, the default node scopes."""
    return {
        "name": spec.gke_cluster,
        "network": network,
        "autopilot": {"enabled": True},
        "node_config": {"oauth_scopes": list(GKE_DEFAULT_SCOPES)},
        "release_channel": {"channel": "REGULAR"},
        "addons_config": {"ray_operator_config": RAY_OPERATOR},
        "ip_allocation_policy": {"use_ip_aliases": True},
        "private_cluster_config": {"enable_private_nodes": True},
        "master_authorized_networks_config": {"gcp_public_cidrs_access_enabled": True},
        "resource_labels": {"managed-by": "raytune"},
    }


RAY_OPERATOR = {
    "enabled": True,
    "ray_cluster_logging_config": {"enabled": True},
    "ray_cluster_monitoring_config": {"enabled": True},
}


class GkeClusters:
    """Finds or creates clusters; never blocks on an operation (Cloud Functions time out)."""

    def __init__(self, project: str, client=None, create: bool = False, network: str = "default"):
        self.project = project
        self._client = client
        self.create = create  # may create clusters and enable the add-on (roles/container.admin)
        self.network = network

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
            if not self.create:
                return ClusterReadiness(
                    "error",
                    f"GKE cluster {spec.gke_cluster} does not exist in {spec.region}: create it with Terraform "
                    "(create_gke_cluster=true) or let the functions create clusters (functions_create_clusters=true)",
                ), None
            parent = f"projects/{self.project}/locations/{spec.region}"
            try:
                self._retried(
                    lambda: self.client.create_cluster(parent=parent, cluster=autopilot_cluster(spec, self.network)),
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
            if not self.create:
                return ClusterReadiness(
                    "error",
                    f"the Ray operator add-on is off on GKE cluster {spec.gke_cluster}: run `gcloud container clusters "
                    f"update {spec.gke_cluster} --location={spec.region} --update-addons=RayOperator=ENABLED` "
                    "(or set functions_create_clusters=true)",
                ), None
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
