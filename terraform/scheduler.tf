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

# The nightly lines: one scheduler job each, one run a day each (its run id is <line>-<date>, however often its job
# fires). The single nightly_config_uri of earlier releases is the line "nightly".
locals {
  nightly_lines = merge(
    var.nightly_config_uri == "" ? {} : {
      nightly = { config_uri = var.nightly_config_uri, schedule = var.nightly_schedule, time_zone = var.time_zone }
    },
    { for line, spec in var.nightly_lines : line => {
      config_uri = spec.config_uri
      schedule   = coalesce(spec.schedule, var.nightly_schedule)
      time_zone  = coalesce(spec.time_zone, var.time_zone)
    } },
  )
}

resource "google_cloud_scheduler_job" "nightly" {
  for_each    = local.nightly_lines
  name        = each.key == "nightly" ? "${var.name}-nightly" : "${var.name}-nightly-${each.key}"
  description = "raytune: the nightly fine-tune ${each.key}"
  region      = var.region
  schedule    = each.value.schedule
  time_zone   = each.value.time_zone
  pubsub_target {
    topic_name = google_pubsub_topic.launch.id
    data       = base64encode(jsonencode({ config_uri = each.value.config_uri, nightly = true, run_name = each.key }))
    # Only messages with this key take the nightly slot (policy nightly_key): other publishers on the
    # launch topic cannot read it.
    attributes = { "raytune-nightly-key" = random_password.nightly_key.result }
  }
  depends_on = [google_project_service.apis]
}

# The single nightly job of earlier releases (count) is the line "nightly" now: moved, not made again.
moved {
  from = google_cloud_scheduler_job.nightly[0]
  to   = google_cloud_scheduler_job.nightly["nightly"]
}
