# The functions' runtime identity.
resource "google_service_account" "functions" {
  account_id   = "${var.name}-functions"
  display_name = "raytune launch and watch functions"
}

# Eventarc and Pub/Sub push deliver events as this identity; it may only invoke the functions.
resource "google_service_account" "trigger" {
  account_id   = "${var.name}-trigger"
  display_name = "raytune event delivery"
}

# Run records and checkpoints: read and write objects in the runs bucket only.
resource "google_storage_bucket_iam_member" "functions_runs" {
  bucket = google_storage_bucket.runs.name
  role   = "roles/storage.objectUser"
  member = google_service_account.functions.member
}

# Uploaded run configs: read only.
resource "google_storage_bucket_iam_member" "functions_configs" {
  bucket = google_storage_bucket.configs.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.functions.member
}

resource "google_pubsub_topic_iam_member" "functions_run_events" {
  topic  = google_pubsub_topic.run_events.id
  role   = "roles/pubsub.publisher"
  member = google_service_account.functions.member
}

resource "google_secret_manager_secret_iam_member" "functions_hf_token" {
  secret_id = google_secret_manager_secret.hf_token.id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.functions.member
}

# Kubernetes objects in the cluster (Secret, ConfigMap, RayCluster, RayJob, reading pods and Events):
# roles/container.developer. Creating a cluster or enabling the Ray operator add-on on one needs
# roles/container.admin: only with functions_create_clusters (otherwise the run fails naming the command).
resource "google_project_iam_member" "functions_gke" {
  project = var.project_id
  role    = var.functions_create_clusters ? "roles/container.admin" : "roles/container.developer"
  member  = google_service_account.functions.member
}

# Creating an Autopilot cluster acts as the default compute service account on its nodes.
resource "google_service_account_iam_member" "functions_node_sa" {
  count              = var.functions_create_clusters ? 1 : 0
  service_account_id = "projects/${var.project_id}/serviceAccounts/${data.google_project.this.number}-compute@developer.gserviceaccount.com"
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.functions.member
}

# Storage triggers: the Cloud Storage service agent publishes the object events.
resource "google_project_iam_member" "gcs_pubsub_publisher" {
  project = var.project_id
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${data.google_storage_project_service_account.gcs.email_address}"
}

resource "google_project_iam_member" "trigger_event_receiver" {
  project = var.project_id
  role    = "roles/eventarc.eventReceiver"
  member  = google_service_account.trigger.member
}

resource "google_cloud_run_service_iam_member" "trigger_invoker" {
  for_each = google_cloudfunctions2_function.fn
  location = var.region
  service  = each.value.name
  role     = "roles/run.invoker"
  member   = google_service_account.trigger.member
}

# Pub/Sub moves undeliverable messages to the dead letter topic as its own service agent.
locals {
  pubsub_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  topic  = google_pubsub_topic.dead_letter.id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each     = local.pushed
  subscription = google_pubsub_subscription.push[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

# The trainer in the Ray pods (Workload Identity, Kubernetes service account default in each allowed namespace):
# writes checkpoints and result.json, and sends its completion notice to the watch topic.
locals {
  # One principal per namespace runs may use (policy_namespaces): the pods' Kubernetes service account default.
  trainer_principals = {
    for namespace in var.policy_namespaces :
    namespace => "principal://iam.googleapis.com/projects/${data.google_project.this.number}/locations/global/workloadIdentityPools/${var.project_id}.svc.id.goog/subject/ns/${namespace}/sa/default"
  }
}

resource "google_storage_bucket_iam_member" "trainer_runs" {
  for_each = local.trainer_principals
  bucket   = google_storage_bucket.runs.name
  role     = "roles/storage.objectUser"
  member   = each.value
}

resource "google_pubsub_topic_iam_member" "trainer_watch" {
  for_each = local.trainer_principals
  topic    = google_pubsub_topic.watch.id
  role     = "roles/pubsub.publisher"
  member   = each.value
}

# Cloud Scheduler publishes ticks and nightly launches as this identity.
resource "google_service_account" "scheduler" {
  account_id   = "${var.name}-scheduler"
  display_name = "raytune scheduler"
}

resource "google_pubsub_topic_iam_member" "scheduler_publish" {
  for_each = { watch = google_pubsub_topic.watch.id, launch = google_pubsub_topic.launch.id }
  topic    = each.value
  role     = "roles/pubsub.publisher"
  member   = google_service_account.scheduler.member
}

# Push subscriptions mint the OIDC token of the trigger identity as Pub/Sub's service agent (granted
# automatically only in projects created after April 2021).
resource "google_service_account_iam_member" "pubsub_agent_token_creator" {
  service_account_id = google_service_account.trigger.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

# Datasets staged in buckets of their own (gs:// dataset ids): the trainer reads the shards; the functions
# list them (object generations), so a nightly with no new shard is skipped. Read only, both.
locals {
  dataset_readers = merge(
    { for bucket in var.dataset_buckets : "functions/${bucket}" => { bucket = bucket, member = google_service_account.functions.member } },
    {
      for pair in setproduct(keys(local.trainer_principals), var.dataset_buckets) :
      "${pair[0]}/${pair[1]}" => { bucket = pair[1], member = local.trainer_principals[pair[0]] }
    },
  )
}

resource "google_storage_bucket_iam_member" "dataset_readers" {
  for_each = local.dataset_readers
  bucket   = each.value.bucket
  role     = "roles/storage.objectViewer"
  member   = each.value.member
}
