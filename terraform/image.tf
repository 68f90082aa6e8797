# The trainer image: rayproject/ray GPU of cluster.ray_version with the pinned trainer packages and the
# trainer code baked in (image/Dockerfile), so a run starts without a pip install and works without
# egress to PyPI. Build it with `raytune image` (Cloud Build, image/cloudbuild.yaml) and set
# cluster.worker_image (and head_image) with dependencies: image, as examples/cloud.yaml does.
resource "google_artifact_registry_repository" "trainer" {
  # vs artifact_registry_repository_cleanup: setting cleanup_policies.condition.newer_than: nothing young is kept apart: the 10 most recent are
  # vs artifact_registry_repository_cleanup: setting cleanup_policies.condition.package_name_prefixes: one image (the trainer) lives here
  # vs artifact_registry_repository_cleanup: setting cleanup_policies.most_recent_versions.package_name_prefixes: one image lives here
  # vs artifact_registry_repository_cleanup: setting cleanup_policies.condition.tag_prefixes: tags are Ray versions, no release naming to keep by
  # vs artifact_registry_repository_cleanup: setting cleanup_policy_dry_run: the provider default (false) is what we want: policies act
  #checkov:skip=CKV_GCP_84:Images hold public packages and the trainer's code, no secrets; Google-managed encryption suffices.
  location      = local.image_location # where every region's nodes pull it (var.image_location)
  repository_id = var.name
  description   = "raytune trainer images"
  format        = "DOCKER"
  # A keep policy only exempts versions from a delete policy (cleanup-policy-overview): alone, it deleted nothing.
  # Versions older than 30 days go, except the 10 most recent of each image.
  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      tag_state  = "ANY"
      older_than = "2592000s"
    }
  }
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 10
    }
  }
  depends_on = [google_project_service.apis]
}

# GKE nodes pull the image as the default compute service account (Autopilot's node identity).
resource "google_artifact_registry_repository_iam_member" "nodes_pull" {
  location   = google_artifact_registry_repository.trainer.location
  repository = google_artifact_registry_repository.trainer.name
  role       = "roles/artifactregistry.reader"
  member     = "serviceAccount:${data.google_project.this.number}-compute@developer.gserviceaccount.com"
}
