output "configs_bucket" {
  description = "Upload run configs to gs://<this>/configs/*.json to launch runs."
  value       = google_storage_bucket.configs.name
}

output "runs_bucket" {
  description = "Run records (runs/<run_id>.json) and checkpoints (checkpoints/<run_id>/)."
  value       = google_storage_bucket.runs.name
}

output "topics" {
  description = "Pub/Sub topics: launch (other systems launch runs), watch (ticks, notices, cancels), run_events (run-finished), dead_letter."
  value = {
    launch      = google_pubsub_topic.launch.id
    watch       = google_pubsub_topic.watch.id
    run_events  = google_pubsub_topic.run_events.id
    dead_letter = google_pubsub_topic.dead_letter.id
  }
}

output "functions" {
  description = "The three Cloud Functions."
  value       = { for key, function in google_cloudfunctions2_function.fn : key => function.name }
}

output "gke_cluster" {
  description = "The Autopilot cluster run configs refer to (cluster.gke_cluster, cluster.region)."
  value       = { name = var.gke_cluster_name, region = var.region, reservation = var.reservation }
}

output "operator_key" {
  description = "Attribute raytune-operator-key for cancelling any run (raytune cancel reads RAYTUNE_OPERATOR_KEY)."
  value       = random_password.operator_key.result
  sensitive   = true
}

output "cli_config" {
  description = "Settings for the operator commands: terraform output -raw cli_config > raytune.toml (add operator_key to cancel others' runs)."
  value       = <<-EOT
    project = "${var.project_id}"
    region = "${var.region}"
    regions = '${jsonencode(local.regions)}'
    runs_bucket = "${google_storage_bucket.runs.name}"
    configs_bucket = "${google_storage_bucket.configs.name}"
    launch_topic = "${google_pubsub_topic.launch.id}"
    watch_topic = "${google_pubsub_topic.watch.id}"
    repository = "${google_artifact_registry_repository.trainer.repository_id}"
    image_repository = "${local.image_location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.trainer.repository_id}"
    build_bucket = "${google_storage_bucket.build.name}"
    image_build_service_account = "${google_service_account.image_build.email}"
    name = "${var.name}"
    gke_cluster = "${var.gke_cluster_name}"
    hf_token_secret = "${google_secret_manager_secret.hf_token.secret_id}"
    node_hour_price = "${var.node_hour_price}"
    node_hour_prices = '${jsonencode(var.node_hour_prices)}'
    price_currency = "${var.price_currency}"
    policy_reservation = "${var.reservation}"
    policy_accelerator = "${var.policy_accelerator}"
    policy_capacity = '${length(var.policy_capacity) > 0 ? jsonencode(var.policy_capacity) : ""}'
  EOT
}
