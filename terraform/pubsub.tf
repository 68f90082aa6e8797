resource "google_pubsub_topic" "launch" {
  #checkov:skip=CKV_GCP_83:Messages carry run ids and gs:// paths, never secrets; Google-managed encryption suffices.
  name       = "${var.name}-launch"
  labels     = local.labels
  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "watch" {
  #checkov:skip=CKV_GCP_83:Messages carry run ids and gs:// paths, never secrets; Google-managed encryption suffices.
  name       = "${var.name}-watch"
  labels     = local.labels
  depends_on = [google_project_service.apis]
}

# Run-finished events (state, checkpoints, metrics) for other systems.
resource "google_pubsub_topic" "run_events" {
  #checkov:skip=CKV_GCP_83:Messages carry run ids and gs:// paths, never secrets; Google-managed encryption suffices.
  name       = "${var.name}-run-events"
  labels     = local.labels
  depends_on = [google_project_service.apis]
}

# Launch and watch messages that kept failing land here, kept for a week for inspection and replay.
resource "google_pubsub_topic" "dead_letter" {
  #checkov:skip=CKV_GCP_83:Messages carry run ids and gs:// paths, never secrets; Google-managed encryption suffices.
  name                       = "${var.name}-dead-letter"
  labels                     = local.labels
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

resource "google_pubsub_subscription" "dead_letter" {
  name                       = "${var.name}-dead-letter"
  labels                     = local.labels
  topic                      = google_pubsub_topic.dead_letter.id
  message_retention_duration = "604800s"
  expiration_policy {
    ttl = ""
  }
}

# Push subscriptions deliver launch and watch messages to the functions (functions-framework turns a
# push envelope into a messagePublished CloudEvent), with backoff and a dead letter topic: a message
# that cannot be handled is retried, then parked, never lost and never retried forever.
locals {
  pushed = {
    launch = { topic = google_pubsub_topic.launch.id, uri = google_cloudfunctions2_function.fn["launch_message"].service_config[0].uri }
    watch  = { topic = google_pubsub_topic.watch.id, uri = google_cloudfunctions2_function.fn["watch"].service_config[0].uri }
  }
}

resource "google_pubsub_subscription" "push" {
  for_each             = local.pushed
  name                 = "${var.name}-${each.key}-push"
  labels               = local.labels
  topic                = each.value.topic
  ack_deadline_seconds = 600
  # vs pubsub_subscription_push: setting push_config.attributes: the default x-goog-version v1 (wrapped) is what
  # functions-framework turns into a messagePublished CloudEvent
  push_config {
    push_endpoint = each.value.uri
    oidc_token {
      service_account_email = google_service_account.trigger.email
    }
  }
  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }
  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = 10
  }
  expiration_policy {
    ttl = ""
  }
  depends_on = [google_pubsub_topic_iam_member.dead_letter_publisher]
}
