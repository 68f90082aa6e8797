"""The cluster the functions create (functions_create_clusters) is the one Terraform creates, held against
the real counterparts: the container API's own proto (google-cloud-container parses the request as the
API would), gcloud's default node scopes read from the installed SDK, and terraform/gke.tf evaluated."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from functions.adapters.gke_clusters import GKE_DEFAULT_SCOPES, RAY_OPERATOR, autopilot_cluster
from functions.core.config import ClusterSpec


def gcloud_default_scopes() -> list[str]:
    """GKE_DEFAULT_SCOPES of the installed Cloud SDK, read by gcloud's own Python."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("gcloud is not installed: the default scopes are read from its SDK")
    info = subprocess.run([gcloud, "info", "--format=json"], capture_output=True, text=True, timeout=60, check=True)
    details = json.loads(info.stdout)
    root, python = details["installation"]["sdk_root"], details["basic"]["python_location"]
    code = (
        "import json, sys; sys.path[:0] = [sys.argv[1] + '/lib', sys.argv[1] + '/lib/third_party']; "
        "from googlecloudsdk.api_lib.compute import constants; "
        "from googlecloudsdk.api_lib.container import api_adapter; "
        "print(json.dumps(api_adapter.ExpandScopeURIs(['gke-default'])))"
    )
    out = subprocess.run([python, "-c", code, root], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_nodes_get_the_scopes_gcloud_and_terraform_send():
    assert sorted(gcloud_default_scopes()) == sorted(GKE_DEFAULT_SCOPES)
    assert "https://www.googleapis.com/auth/devstorage.read_only" in GKE_DEFAULT_SCOPES  # Artifact Registry pulls


def test_the_request_parses_as_the_container_api_reads_it():
    from google.cloud import container_v1

    spec = ClusterSpec(gke_cluster="tuning", region="europe-west4")
    cluster = container_v1.Cluster(autopilot_cluster(spec, network="vpc-a"))  # unknown fields raise here
    assert cluster.autopilot.enabled and cluster.name == "tuning" and cluster.network == "vpc-a"
    assert list(cluster.node_config.oauth_scopes) == list(GKE_DEFAULT_SCOPES)
    assert cluster.private_cluster_config.enable_private_nodes and cluster.ip_allocation_policy.use_ip_aliases
    ray = cluster.addons_config.ray_operator_config
    assert ray.enabled and ray.ray_cluster_logging_config.enabled and ray.ray_cluster_monitoring_config.enabled
    assert RAY_OPERATOR["enabled"] is True


def test_terraform_creates_the_same_cluster():
    from tests.contract.tfeval import Module

    module = Module(Path(__file__).resolve().parents[2] / "terraform", {"project_id": "proj"})
    [cluster] = module.instances("google_container_cluster")
    spec = autopilot_cluster(ClusterSpec(), network=module.var("network"))
    assert cluster.get("enable_autopilot") is True and cluster.get("network") == spec["network"]
    [private] = cluster.blocks("private_cluster_config")
    assert (
        module.eval(private.body["enable_private_nodes"], {}) is spec["private_cluster_config"]["enable_private_nodes"]
    )
    [channel] = cluster.blocks("release_channel")
    assert module.eval(channel.body["channel"], {}) == spec["release_channel"]["channel"]
    assert cluster.get("resource_labels") == spec["resource_labels"]
    # No node_config in gke.tf: the provider sends defaultOauthScopes, which GKE_DEFAULT_SCOPES matches.
    assert not cluster.blocks("node_config") and not cluster.has("node_config")
