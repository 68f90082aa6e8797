"""The google-cloud-container ClusterManagerClient calls GkeClusters makes, in memory, parsing the real
proto requests."""

from __future__ import annotations

import threading


class FakeClusterManager:
    """The google-cloud-container ClusterManagerClient calls GkeClusters makes, in memory.
    A created cluster is PROVISIONING until `finish_provisioning()`."""

    def __init__(self):
        self.clusters: dict[str, object] = {}
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def get_cluster(self, name):
        from google.api_core.exceptions import NotFound

        with self.lock:
            self.calls.append("get")
            if name not in self.clusters:
                raise NotFound(f"cluster {name} not found")
            return self.clusters[name]

    def create_cluster(self, parent, cluster):
        from google.api_core.exceptions import AlreadyExists
        from google.cloud import container_v1

        with self.lock:
            self.calls.append("create")
            obj = container_v1.Cluster(cluster)
            name = f"{parent}/clusters/{obj.name}"
            if name in self.clusters:
                raise AlreadyExists(f"cluster {name} exists")
            obj.status = container_v1.Cluster.Status.PROVISIONING
            self.clusters[name] = obj
            return container_v1.Operation(name="op-create")

    def update_cluster(self, name, update):
        from google.cloud import container_v1

        with self.lock:
            self.calls.append("update")
            update = container_v1.ClusterUpdate(update)  # the request as the API would parse it
            cluster = self.clusters[name]
            cluster.addons_config.ray_operator_config = update.desired_addons_config.ray_operator_config
            cluster.status = container_v1.Cluster.Status.RECONCILING
            return container_v1.Operation(name="op-update")

    def finish_provisioning(self):
        from google.cloud import container_v1

        with self.lock:
            for cluster in self.clusters.values():
                cluster.status = container_v1.Cluster.Status.RUNNING
                cluster.endpoint = "10.0.0.1"

    def add_running(self, path: str, ray_operator: bool = True):
        from google.cloud import container_v1

        cluster = container_v1.Cluster(
            name=path.rsplit("/", 1)[-1],
            location=path.split("/locations/", 1)[1].split("/", 1)[0],  # as GKE answers: the cluster's region
            status=container_v1.Cluster.Status.RUNNING,
            endpoint="10.0.0.1",
        )
        cluster.addons_config.ray_operator_config.enabled = ray_operator
        self.clusters[path] = cluster
