locals {
  # On what Terraform makes that takes labels: who made it, for billing and inventory.
  labels = { managed-by = "raytune" }
  apis = [
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "compute.googleapis.com",
    "container.googleapis.com",
    "eventarc.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ]
  # Vertex AI only where runs track there (var.tracking_vertex).
  optional_apis = var.tracking_vertex ? ["aiplatform.googleapis.com"] : []
}

resource "google_project_service" "apis" {
  # vs google_project_service#0: setting project: the provider's project (versions.tf), which is var.project_id
  # vs google_project_service#0: setting timeouts: the provider's (20 minutes) suffice for enabling APIs
  # vs google_project_service#0: setting timeouts.create: as for the line above
  # vs google_project_service#0: setting timeouts.update: as for the line above
  for_each           = toset(concat(local.apis, local.optional_apis))
  service            = each.value
  disable_on_destroy = false
}
