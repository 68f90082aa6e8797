# Pub/Sub targets publish as the Cloud Scheduler service agent, not as a service account of ours, so no topic
# grant is needed (https://cloud.google.com/iam/docs/roles-permissions/cloudscheduler: "a Cloud Scheduler Admin
# (or any custom role with the permission cloudscheduler.jobs.create) can create jobs that publish to any
# Pub/Sub topics within the project"). Whoever may create scheduler jobs may therefore publish to launch and
# watch: keep cloudscheduler.jobs.create to operators (the nightly slot still needs the nightly key).
resource "google_cloud_scheduler_job" "watch_tick" {
  name        = "${var.name}-watch-tick"
  description = "raytune: the watch function's tick (runs no event reached, the leak sweep)"
  region      = var.region
  schedule    = var.watch_schedule
  time_zone   = var.time_zone
  pubsub_target {
    topic_name = google_pubsub_topic.watch.id
    data       = base64encode(jsonencode({ kind = "tick" }))
  }
  depends_on = [google_project_service.apis]
}

# The nightly fine-tune: one run a day (its run id is nightly-<date>, however often the job fires).
resource "google_cloud_scheduler_job" "nightly" {
  count       = var.nightly_config_uri == "" ? 0 : 1
  name        = "${var.name}-nightly"
  description = "raytune: the nightly fine-tune"
  region      = var.region
  schedule    = var.nightly_schedule
  time_zone   = var.time_zone
  pubsub_target {
    topic_name = google_pubsub_topic.launch.id
    data       = base64encode(jsonencode({ config_uri = var.nightly_config_uri, nightly = true, run_name = "nightly" }))
    # Only messages with this key take the nightly slot (policy nightly_key): other publishers on the
    # launch topic cannot read it.
    attributes = { "raytune-nightly-key" = random_password.nightly_key.result }
  }
  depends_on = [google_project_service.apis]
}
