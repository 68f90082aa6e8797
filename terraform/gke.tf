# The GKE Autopilot cluster with the Ray operator add-on (KubeRay), Ray logs and metrics in Cloud
# Logging/Monitoring, one in every region runs may use (var.region first, then policy_regions: a run waiting for
# capacity moves to the next of its config's regions, docs/regions.md), each of the same name. A4 (B200) nodes come
# and go with the RayCluster's GPU worker group. Indexed by the regions' order, so var.region's stays [0] (the
# address of the one cluster before regions): add regions at the end of policy_regions, never reorder them.
resource "google_container_cluster" "ray" {
  # vs gkebackup_backupplan_autopilot: setting addons_config.gke_backup_agent_config: nothing to back up: no volumes, checkpoints are in GCS
  # vs gkebackup_backupplan_autopilot: setting addons_config.gke_backup_agent_config.enabled: as for the line above
  # vs gkebackup_backupplan_autopilot: setting subnetwork: var.network's subnet in the region (auto mode), which GKE picks
  # vs simple_autopilot_private: setting subnetwork: as for the line above; a custom-mode VPC needs it (an existing cluster: create_gke_cluster=false)
  # vs simple_autopilot_private: setting private_cluster_config.enable_private_endpoint: the functions reach the API server from Google's network (no VPC connector); public endpoint, Google CIDRs only
  # vs simple_autopilot_private: setting private_cluster_config.master_ipv4_cidr_block: Autopilot clusters made now use Private Service Connect: no range to reserve
  # vs simple_autopilot_private: setting master_authorized_networks_config.cidr_blocks: gcp_public_cidrs_access_enabled admits Google's ranges, where the functions call from
  # vs simple_autopilot_private: setting cluster_autoscaling.auto_provisioning_defaults.service_account: nodes run as the Compute Engine default (image pulls granted in image.tf); a dedicated node identity is a later hardening
  # vs simple_autopilot_private: setting vertical_pod_autoscaling.enabled: Autopilot turns it on itself
  count            = var.create_gke_cluster ? length(local.regions) : 0
  name             = var.gke_cluster_name
  location         = local.regions[count.index]
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
