locals {
  function_env = {
    RAYTUNE_PROJECT         = var.project_id
    RAYTUNE_BUCKET          = google_storage_bucket.runs.name
    RAYTUNE_WATCH_TOPIC     = google_pubsub_topic.watch.id
    RAYTUNE_EVENTS_TOPIC    = google_pubsub_topic.run_events.id
    RAYTUNE_MAX_EVENT_AGE_S = tostring(var.max_event_age_seconds)
    LOG_EXECUTION_ID        = "true"
  }
  functions = {
    launch_upload  = { name = "${var.name}-launch-upload", entry_point = "launch", instances = 10 }
    launch_message = { name = "${var.name}-launch-message", entry_point = "launch", instances = 10 }
    # One watcher at a time is enough; more would only contend on the same records.
    watch = { name = "${var.name}-watch", entry_point = "watch", instances = 1 }
  }
}

# A run config uploaded to the configs bucket (storage finalize through Eventarc).
resource "google_cloudfunctions2_function" "launch_upload" {
  name     = local.functions.launch_upload.name
  location = var.region
  build_config {
    runtime     = "python311"
    entry_point = local.functions.launch_upload.entry_point
    source {
      storage_source {
        bucket = google_storage_bucket.runs.name
        object = google_storage_bucket_object.function_source.name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.functions.email
    timeout_seconds                  = 540
    available_memory                 = "512Mi"
    max_instance_count               = local.functions.launch_upload.instances
    max_instance_request_concurrency = 8
    available_cpu                    = "1"
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    environment_variables            = local.function_env
    secret_environment_variables {
      key        = "HF_TOKEN"
      project_id = var.project_id
      secret     = google_secret_manager_secret.hf_token.secret_id
      version    = "latest"
    }
  }
  event_trigger {
    trigger_region        = var.region # the bucket's location
    event_type            = "google.cloud.storage.object.v1.finalized"
    retry_policy          = "RETRY_POLICY_RETRY"
    service_account_email = google_service_account.trigger.email
    event_filters {
      attribute = "bucket"
      value     = google_storage_bucket.configs.name
    }
  }
  depends_on = [google_project_iam_member.gcs_pubsub_publisher, google_project_iam_member.trigger_event_receiver]
}

# Launch messages from other systems and the nightly scheduler (Pub/Sub push, see pubsub.tf).
resource "google_cloudfunctions2_function" "launch_message" {
  name     = local.functions.launch_message.name
  location = var.region
  build_config {
    runtime     = "python311"
    entry_point = local.functions.launch_message.entry_point
    source {
      storage_source {
        bucket = google_storage_bucket.runs.name
        object = google_storage_bucket_object.function_source.name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.functions.email
    timeout_seconds                  = 540
    available_memory                 = "512Mi"
    max_instance_count               = local.functions.launch_message.instances
    max_instance_request_concurrency = 8
    available_cpu                    = "1"
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    environment_variables            = local.function_env
    secret_environment_variables {
      key        = "HF_TOKEN"
      project_id = var.project_id
      secret     = google_secret_manager_secret.hf_token.secret_id
      version    = "latest"
    }
  }
}

# Scheduler ticks, trainer completion notices and cancel requests (Pub/Sub push, see pubsub.tf).
resource "google_cloudfunctions2_function" "watch" {
  name     = local.functions.watch.name
  location = var.region
  build_config {
    runtime     = "python311"
    entry_point = local.functions.watch.entry_point
    source {
      storage_source {
        bucket = google_storage_bucket.runs.name
        object = google_storage_bucket_object.function_source.name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.functions.email
    timeout_seconds                  = 540
    available_memory                 = "512Mi"
    max_instance_count               = local.functions.watch.instances
    max_instance_request_concurrency = 1
    available_cpu                    = "1"
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    environment_variables            = local.function_env
    secret_environment_variables {
      key        = "HF_TOKEN"
      project_id = var.project_id
      secret     = google_secret_manager_secret.hf_token.secret_id
      version    = "latest"
    }
  }
}
