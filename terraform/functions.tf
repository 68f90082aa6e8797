locals {
  function_env = {
    RAYTUNE_PROJECT          = var.project_id
    RAYTUNE_BUCKET           = google_storage_bucket.runs.name
    RAYTUNE_CHECKPOINTS      = "gs://${google_storage_bucket.runs.name}/checkpoints"
    RAYTUNE_WATCH_TOPIC      = google_pubsub_topic.watch.id
    RAYTUNE_EVENTS_TOPIC     = google_pubsub_topic.run_events.id
    RAYTUNE_MAX_EVENT_AGE_S  = tostring(var.max_event_age_seconds)
    RAYTUNE_NODE_HOUR_PRICE  = var.node_hour_price
    RAYTUNE_NODE_HOUR_PRICES = length(var.node_hour_prices) > 0 ? jsonencode(var.node_hour_prices) : ""
    LOG_EXECUTION_ID         = "true"
    RAYTUNE_CREATE_CLUSTERS  = tostring(var.functions_create_clusters)
    RAYTUNE_NETWORK          = var.network
    RAYTUNE_SWEEP_GRACE_S    = tostring(var.sweep_grace_seconds)
    RAYTUNE_RETRY_BACKOFF_S  = tostring(var.retry_backoff_seconds)
    # The operator policy (policy.tf): what a config or message may touch.
    RAYTUNE_POLICY_NAMESPACES             = join(",", var.policy_namespaces)
    RAYTUNE_POLICY_RAY_CLUSTER_PREFIX     = var.policy_ray_cluster_prefix
    RAYTUNE_POLICY_IMAGES                 = join(",", var.policy_images)
    RAYTUNE_POLICY_ALLOW_PIP              = tostring(var.policy_allow_pip)
    RAYTUNE_POLICY_RESERVATION            = var.reservation
    RAYTUNE_POLICY_ACCELERATOR            = var.policy_accelerator
    RAYTUNE_POLICY_NODE_SELECTOR          = length(var.policy_node_selector) > 0 ? jsonencode(var.policy_node_selector) : ""
    RAYTUNE_POLICY_CAPACITY               = length(var.policy_capacity) > 0 ? jsonencode(var.policy_capacity) : ""
    RAYTUNE_POLICY_CAPACITY_KINDS         = join(",", var.policy_capacity_kinds)
    RAYTUNE_POLICY_RESERVATION_PROJECTS   = join(",", distinct(concat([var.project_id], var.policy_reservation_projects)))
    RAYTUNE_POLICY_IMAGE_CACHE_PROJECTS   = join(",", distinct(concat([var.project_id], var.policy_image_cache_projects)))
    RAYTUNE_POLICY_BUCKETS                = join(",", concat([google_storage_bucket.runs.name, google_storage_bucket.configs.name], var.policy_buckets))
    RAYTUNE_POLICY_STORAGE_BUCKETS        = join(",", values(local.storage_buckets))
    RAYTUNE_POLICY_DATASET_BUCKETS        = join(",", concat(values(local.storage_buckets), var.dataset_buckets))
    RAYTUNE_POLICY_REGIONS                = join(",", local.regions)
    RAYTUNE_POLICY_DEFAULT_REGIONS        = join(",", var.policy_default_regions)
    RAYTUNE_POLICY_REGION_SECONDS         = tostring(var.policy_region_seconds)
    RAYTUNE_POLICY_REGION_SECONDS_CEILING = tostring(var.policy_region_seconds_ceiling)
    RAYTUNE_POLICY_GKE_CLUSTERS           = join(",", concat([var.gke_cluster_name], var.policy_gke_clusters))
    RAYTUNE_POLICY_MAX_WORKER_NODES       = tostring(var.policy_max_worker_nodes)
    RAYTUNE_POLICY_TRACKING               = var.policy_tracking == null ? "" : jsonencode(var.policy_tracking)
    RAYTUNE_POLICY_TRACKING_DESTINATIONS  = join(",", var.policy_tracking_destinations)
    RAYTUNE_POLICY_TRACKING_URIS          = join(",", var.policy_tracking_uris)
    RAYTUNE_NIGHTLY_KEY                   = random_password.nightly_key.result
    RAYTUNE_OPERATOR_KEY                  = random_password.operator_key.result
  }
  functions = {
    # A run config uploaded to the configs bucket (storage finalize through Eventarc, retried).
    launch_upload = { entry_point = "launch", instances = 10, concurrency = 8, trigger_bucket = google_storage_bucket.configs.name, description = "raytune: launch the run a config uploaded to the configs bucket describes" }
    # Launch messages from other systems and the nightly scheduler (Pub/Sub push, see pubsub.tf).
    launch_message = { entry_point = "launch", instances = 10, concurrency = 8, trigger_bucket = null, description = "raytune: launch runs other systems and the nightly schedule ask for" }
    # Ticks, completion notices, cancels (Pub/Sub push). One watcher at a time: more would only contend.
    watch = { entry_point = "watch", instances = 1, concurrency = 1, trigger_bucket = null, description = "raytune: follow runs to their end, record them, scale the GPU workers down" }
  }
}

resource "google_cloudfunctions2_function" "fn" {
  # vs cloudfunctions2_basic_gcs: setting build_config.environment_variables: the build needs none (pip installs requirements.txt as is)
  # vs cloudfunctions2_basic_gcs: setting service_config.min_instance_count: 0: events are not latency-bound, an idle instance costs money
  # vs cloudfunctions2_basic_gcs: setting service_config.all_traffic_on_latest_revision: the provider default (true) already
  for_each    = local.functions
  name        = "${var.name}-${replace(each.key, "_", "-")}"
  description = each.value.description
  location    = var.region
  build_config {
    runtime     = "python311"
    entry_point = each.value.entry_point
    # Its own build identity (iam.tf): new projects give the default one no roles.
    service_account = google_service_account.function_build.id
    source {
      storage_source {
        bucket = google_storage_bucket.build.name
        object = google_storage_bucket_object.function_source.name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.functions.email
    timeout_seconds                  = 540
    available_memory                 = "512Mi"
    available_cpu                    = "1"
    max_instance_count               = each.value.instances
    max_instance_request_concurrency = each.value.concurrency
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    environment_variables            = local.function_env
    secret_environment_variables {
      key        = "HF_TOKEN"
      project_id = var.project_id
      secret     = google_secret_manager_secret.hf_token.secret_id
      version    = "latest"
    }
    dynamic "secret_environment_variables" {
      for_each = google_secret_manager_secret.tracking
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = "latest"
      }
    }
  }
  dynamic "event_trigger" {
    for_each = each.value.trigger_bucket == null ? [] : [each.value.trigger_bucket]
    content {
      trigger_region        = var.region # the bucket's location
      event_type            = "google.cloud.storage.object.v1.finalized"
      retry_policy          = "RETRY_POLICY_RETRY"
      service_account_email = google_service_account.trigger.email
      event_filters {
        attribute = "bucket"
        value     = event_trigger.value
      }
    }
  }
  # The build identity's grants are effective (iam.tf, terraform_data.function_build_access) before a build starts.
  # vs cloudfunctions2_basic_builder: order after time_sleep: a fixed 60 s fails about half the time (hashicorp/terraform-provider-google#20571); the access probe waits until the build identity is let in
  depends_on = [
    google_project_iam_member.gcs_pubsub_publisher,
    google_project_iam_member.trigger_event_receiver,
    terraform_data.function_build_access,
  ]
}
