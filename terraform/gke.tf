# The GKE Autopilot cluster with the Ray operator add-on (KubeRay), Ray logs and metrics in Cloud
# Logging/Monitoring. A4 (B200) nodes come and go with the RayCluster's GPU worker group.
resource "google_container_cluster" "ray" {
  count            = var.create_gke_cluster ? 1 : 0
  name             = var.gke_cluster_name
  location         = var.region
  network          = var.network
  enable_autopilot = true
  # REGULAR has had every version past the minimum since 2025. The minimum is the oldest GKE with everything the
  # controller renders (flex-start GPUs in a ComputeClass; functions/core/computeclass.py MIN_GKE_VERSION).
  release_channel {
    channel = "REGULAR"
  }
  min_master_version = var.gke_min_version
  addons_config {
    ray_operator_config {
      enabled = true
      ray_cluster_logging_config {
        enabled = true
      }
      ray_cluster_monitoring_config {
        enabled = true
      }
    }
  }
  # VPC-native (alias IP ranges), chosen by GKE.
  ip_allocation_policy {}
  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }
  private_cluster_config {
    enable_private_nodes = true
  }
  master_authorized_networks_config {
    gcp_public_cidrs_access_enabled = true
  }
  resource_labels = {
    managed-by = "raytune"
  }
  deletion_protection = true
  # Private nodes reach the internet through Cloud NAT (network.tf).
  depends_on = [google_project_service.apis, google_compute_router_nat.nat]
  #checkov:skip=CKV_GCP_12:Autopilot enforces network policies with GKE Dataplane V2; it cannot be switched off.
  #checkov:skip=CKV_GCP_61:Autopilot manages intranode visibility; VPC flow logs belong to the subnet, not this module.
  #checkov:skip=CKV_GCP_21:Labels are set (resource_labels); the check expects the older label field.
  #checkov:skip=CKV_GCP_65:Google Groups for RBAC needs a Workspace domain; IAM (roles/container.*) governs access.
  #checkov:skip=CKV_GCP_66:Binary Authorization would block the public rayproject/ray images the recipe uses.
  #checkov:skip=CKV_GCP_69:Autopilot enables the GKE metadata server (Workload Identity) on every node.
}
