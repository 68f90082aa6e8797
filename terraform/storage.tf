# Run records (runs/), allocations (clusters/), champions and nightly pointers, checkpoints (checkpoints/).
resource "google_storage_bucket" "runs" {
  name = "${var.name}-runs-${var.project_id}"
  # Every region's runs read and write here (checkpoints a moved run resumes from, staged models): a dual- or
  # multi-region location (var.data_location) where runs move between regions, else var.region.
  location                    = local.data_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  versioning {
    enabled = true
  }
  # Superseded versions of run records and checkpoints are kept 30 days, then deleted.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }
  # Model snapshots the trainer stages once per revision (checkpoints/_models/<repo>/<commit>/, trainer/staging.py)
  # are deleted this long after staging: a revision no run uses stops costing storage, and the next run of one
  # still in use downloads it from the Hub again and stages it anew (a copy missing files is never trained from).
  dynamic "lifecycle_rule" {
    for_each = var.staged_model_days > 0 ? [var.staged_model_days] : []
    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = ["checkpoints/_models/"]
      }
      action {
        type = "Delete"
      }
    }
  }
  #checkov:skip=CKV_GCP_62:Access logs go to Cloud Audit Logs (data access), not a second logging bucket.
  depends_on = [google_project_service.apis]
}

# Uploads here launch runs. A bucket of its own, so the records and checkpoints the controller writes
# never trigger the launch function.
resource "google_storage_bucket" "configs" {
  name                        = "${var.name}-configs-${var.project_id}"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  versioning {
    enabled = true
  }
  #checkov:skip=CKV_GCP_62:Access logs go to Cloud Audit Logs (data access), not a second logging bucket.
  depends_on = [google_project_service.apis]
}

# In the build bucket. Cloud Functions' service agent copies it into its own gcf-v2-sources bucket, which the
# functions' build reads (iam.tf): that build never sees run records.
resource "google_storage_bucket_object" "function_source" {
  # vs storage_bucket_object#1: setting content: the archive is a file (source), built by `raytune package`
  # vs storage_bucket_object#2: setting contexts: no object contexts are read by anything here
  # vs storage_bucket_object#2: setting contexts.custom: as for the line above
  # vs storage_bucket_object#2: setting contexts.custom.key: as for the line above
  # vs storage_bucket_object#2: setting contexts.custom.value: as for the line above
  name   = "functions/raytune-functions-${filemd5(var.function_source_zip)}.zip"
  bucket = google_storage_bucket.build.name
  source = var.function_source_zip
}

# What the builds read: the functions' source archive (functions/) and the source `raytune image` stages
# (gcloud builds submit --gcs-source-staging-dir, image-source/, deleted after a week). Neither build's service
# account reads the runs bucket.
resource "google_storage_bucket" "build" {
  name                        = "${var.name}-build-${var.project_id}"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  versioning {
    enabled = true
  }
  lifecycle_rule {
    condition {
      age            = 7
      matches_prefix = ["image-source/", "${local.function_build_probe}/"]
    }
    action {
      type = "Delete"
    }
  }
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 1
    }
    action {
      type = "Delete"
    }
  }
  #checkov:skip=CKV_GCP_62:Access logs go to Cloud Audit Logs (data access), not a second logging bucket.
  depends_on = [google_project_service.apis]
}
