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

# `raytune image --cache` (docs/gpu-start.md): the image build also runs Google's gke-disk-image-builder, which
# makes a VM with a blank disk, lets the VM pull and unpack the trainer image onto it, makes a disk image of that
# disk and deletes the rest. Google's README for it grants the build roles/compute.admin; the build needs
# instances, disks and images (functions/core/permissions.py lists each call), which roles/compute.instanceAdmin.v1
# holds without compute.admin's networks, firewalls and routers. The VM runs as an account of its own that can
# read the trainer image and its startup script, and nothing else.
resource "google_project_iam_member" "image_build_cache_disks" {
  count   = var.image_cache ? 1 : 0
  project = var.project_id
  role    = "roles/compute.instanceAdmin.v1"
  member  = google_service_account.image_build.member
}

resource "google_service_account" "image_cache" {
  count        = var.image_cache ? 1 : 0
  account_id   = "${var.name}-image-cache"
  display_name = "raytune image cache builder VM"
}

resource "google_service_account_iam_member" "image_build_runs_cache_vm" {
  count              = var.image_cache ? 1 : 0
  service_account_id = google_service_account.image_cache[0].name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.image_build.member
}

resource "google_artifact_registry_repository_iam_member" "image_cache_pull" {
  count      = var.image_cache ? 1 : 0
  location   = google_artifact_registry_repository.trainer.location
  repository = google_artifact_registry_repository.trainer.name
  role       = "roles/artifactregistry.reader"
  member     = google_service_account.image_cache[0].member
}

# Daisy's scratch space is image-cache/ in the build bucket (functions/cli/image.py passes it as --gcs-path): the
# build writes the VM's startup script and the workflow's log there, the VM reads the script. Nothing else of the
# bucket (the staged sources, the function build's probe) is theirs to write or the VM's to read.
locals {
  image_cache_scratch_grants = var.image_cache ? {
    build = { role = "roles/storage.objectUser", member = google_service_account.image_build.member }
    vm    = { role = "roles/storage.objectViewer", member = google_service_account.image_cache[0].member }
  } : {}
}

resource "google_storage_bucket_iam_member" "image_cache_scratch" {
  for_each = local.image_cache_scratch_grants
  bucket   = google_storage_bucket.build.name
  role     = each.value.role
  member   = each.value.member
  condition {
    title       = "raytune-image-cache-scratch-only"
    description = "gke-disk-image-builder's scratch space under image-cache/ in the build bucket"
    expression  = local.within.image_cache
  }
}
