# Egress for the private cluster nodes: Cloud NAT on the clusters' network in every region runs may use
# (var.region and policy_regions, each with its cluster: gke.tf; the functions reject a config naming another), so
# pods reach PyPI
# (runtime-env pip), the Hugging Face Hub (model, dataset) and Docker Hub (rayproject/ray) without public node
# IPs, also on clusters the functions create (functions_create_clusters) in those regions.
# Skip it (create_nat = false) only in a no-egress setup: image from Artifact Registry with everything in
# it (raytune image), model and dataset staged in a bucket (gs:// paths in the run config).
locals {
  regions        = distinct(concat([var.region], var.policy_regions))
  data_location  = coalesce(var.data_location, var.region)
  image_location = coalesce(var.image_location, var.region)
}

resource "google_compute_router" "nat" {
  # vs router_nat_basic: setting bgp: NAT only: no BGP peers, and GCE picks a private ASN when none is given
  # vs router_nat_basic: setting bgp.asn: as above: nothing peers with this router
  for_each   = var.create_nat ? toset(local.regions) : toset([])
  name       = "${var.name}-nat-router"
  region     = each.value
  network    = var.network
  depends_on = [google_project_service.apis]
}

resource "google_compute_router_nat" "nat" {
  for_each                           = google_compute_router.nat
  name                               = "${var.name}-nat"
  router                             = each.value.name
  region                             = each.value.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}
