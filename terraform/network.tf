# Egress for the private cluster nodes: Cloud NAT on the cluster's network, so pods reach PyPI (runtime-env
# pip), the Hugging Face Hub (model, dataset) and Docker Hub (rayproject/ray) without public node IPs.
# Skip it (create_nat = false) only in a no-egress setup: image from Artifact Registry with everything in
# it (raytune image), model and dataset staged in a bucket (gs:// paths in the run config).
resource "google_compute_router" "nat" {
  count      = var.create_nat ? 1 : 0
  name       = "${var.name}-nat-router"
  region     = var.region
  network    = var.network
  depends_on = [google_project_service.apis]
}

resource "google_compute_router_nat" "nat" {
  count                              = var.create_nat ? 1 : 0
  name                               = "${var.name}-nat"
  router                             = google_compute_router.nat[0].name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}
