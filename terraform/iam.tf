# Every identity and what it is granted. functions/core/permissions.py lists each call these identities make
# and the permission it needs; tests/contract/test_iam_grants.py holds, for every setting of the variables
# below, that these grants cover them (against Google's permission lists of each role) and grant nothing more.

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

locals {
  # Buckets a run's storage_path may name (checkpoints, result.json, the adapter): the runs bucket and the
  # policy buckets. Keys are known at plan time; values are the bucket names.
  storage_buckets = merge({ runs = google_storage_bucket.runs.name }, { for bucket in var.policy_buckets : bucket => bucket })
  # Ray Train's StorageContext and the trainer's writes go through pyarrow's GcsFileSystem, whose create_dir
  # reads the bucket's metadata when no parent folder marker exists (arrow cpp/src/arrow/filesystem/gcsfs.cc,
  # CreateDirMarkerRecursive): storage.buckets.get, which objectUser lacks. legacyBucketReader (GA) adds just that
  # (and objects.list, already there).
  storage_path_roles = ["roles/storage.objectUser", "roles/storage.legacyBucketReader"]
  dataset_roles      = ["roles/storage.objectViewer", "roles/storage.legacyBucketReader"]
}

# Run records and allocations (compare-and-swap), champions, nightly pointers; result.json: read and write
# objects in the runs bucket only.
resource "google_storage_bucket_iam_member" "functions_runs" {
  # vs storage_bucket_iam#4: setting timeouts: the provider's default suffices for a policy write
  # vs storage_bucket_iam#4: setting timeouts.create: as for the line above
  bucket = google_storage_bucket.runs.name
  role   = "roles/storage.objectUser"
  member = google_service_account.functions.member
}

# Uploaded run configs, and configs and results in the policy buckets: read only.
resource "google_storage_bucket_iam_member" "functions_read" {
  for_each = merge({ configs = google_storage_bucket.configs.name }, { for bucket in var.policy_buckets : bucket => bucket })
  bucket   = each.value
  role     = "roles/storage.objectViewer"
  member   = google_service_account.functions.member
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

resource "google_secret_manager_secret_iam_member" "functions_tracking" {
  for_each  = google_secret_manager_secret.tracking
  secret_id = each.value.id
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
  # vs google_service_account_iam#4: setting condition: actAs on one service account has nothing narrower to condition on
  # vs google_service_account_iam#4: setting condition.description: as for the line above
  # vs google_service_account_iam#4: setting condition.expression: as for the line above
  # vs google_service_account_iam#4: setting condition.title: as for the line above
  count              = var.functions_create_clusters ? 1 : 0
  service_account_id = "projects/${var.project_id}/serviceAccounts/${local.node_service_account}"
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
  pubsub_agent         = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  node_service_account = "${data.google_project.this.number}-compute@developer.gserviceaccount.com"
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

# Push subscriptions mint the OIDC token of the trigger identity as Pub/Sub's service agent (granted
# automatically only in projects created after April 2021).
resource "google_service_account_iam_member" "pubsub_agent_token_creator" {
  service_account_id = google_service_account.trigger.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

# The trainer in the Ray pods (Workload Identity, Kubernetes service account default in each allowed namespace):
# checkpoints, result.json and the adapter under storage_path, and its completion notice to the watch topic.
locals {
  # One principal per namespace runs may use (policy_namespaces): the pods' Kubernetes service account default.
  trainer_principals = {
    for namespace in var.policy_namespaces :
    namespace => "principal://iam.googleapis.com/projects/${data.google_project.this.number}/locations/global/workloadIdentityPools/${var.project_id}.svc.id.goog/subject/ns/${namespace}/sa/default"
  }
  # Object access in the runs bucket is trainer_runs_bucket's alone (below).
  trainer_storage = {
    for triple in setproduct(keys(local.trainer_principals), keys(local.storage_buckets), local.storage_path_roles) :
    join(" ", triple) => { member = local.trainer_principals[triple[0]], bucket = local.storage_buckets[triple[1]], role = triple[2] }
    if !(triple[1] == "runs" && triple[2] == "roles/storage.objectUser")
  }
}

resource "google_storage_bucket_iam_member" "trainer_storage" {
  for_each = local.trainer_storage
  bucket   = each.value.bucket
  role     = each.value.role
  member   = each.value.member
}

# In the runs bucket the trainer reads and writes objects under checkpoints/ only, and reads datasets/: the run
# records, allocations, champion and nightly pointers beside them are the functions' (a pod that could rewrite a
# queued run's record could change what the next submission applies). IAM Conditions on Cloud Storage match the object's name
# (resource.name "projects/_/buckets/BUCKET/objects/NAME"; the bucket uses uniform bucket-level access, which
# conditions need): https://cloud.google.com/storage/docs/access-control/iam#conditions. A prefix per run is not
# possible: every run's pods share the namespace's Kubernetes service account, so they share one principal.
# objects.list is checked on the bucket (legacyBucketReader above grants it), so listing stays possible.
locals {
  runs_objects = "projects/_/buckets/${google_storage_bucket.runs.name}/objects"
  # The trainer's conditional grants in the runs bucket: read and write checkpoints/, read datasets/ (datasets
  # staged there). The folder's own name too: pyarrow's GcsFileSystem reads the object "checkpoints" to tell a file
  # from a folder. functions/handlers/settings.py rejects configs pointing elsewhere in the bucket.
  trainer_runs_bucket = {
    "roles/storage.objectUser"   = "checkpoints"
    "roles/storage.objectViewer" = "datasets"
  }
  trainer_runs_grants = {
    for pair in setproduct(keys(local.trainer_principals), keys(local.trainer_runs_bucket)) :
    join(" ", pair) => { member = local.trainer_principals[pair[0]], role = pair[1], prefix = local.trainer_runs_bucket[pair[1]] }
  }
}

resource "google_storage_bucket_iam_member" "trainer_runs_bucket" {
  for_each = local.trainer_runs_grants
  bucket   = google_storage_bucket.runs.name
  role     = each.value.role
  member   = each.value.member
  condition {
    title       = "raytune-${each.value.prefix}-only"
    description = "the trainer's ${each.value.prefix}/ in the runs bucket; never the functions' run records"
    expression  = local.within[each.value.prefix]
  }
}

# tracking.vertex: the run's experiment, its runs, their backing TensorBoard and curves (google-cloud-aiplatform's
# ExperimentRun; functions/core/permissions.py names each permission). Vertex AI User is the narrowest
# predefined role that creates metadata contexts and TensorBoard resources.
resource "google_project_iam_member" "trainer_vertex" {
  for_each = var.tracking_vertex ? local.trainer_principals : {}
  project  = var.project_id
  role     = "roles/aiplatform.user"
  member   = each.value
}

# A line's champion in the Vertex AI Model Registry (tracking.vertex.serving_image): the functions register the
# champion's model as a version and move its alias. The Vertex AI service agent reads the version's files in the
# runs bucket with the role Google gives it in the project (roles/aiplatform.serviceAgent: storage.objects.get
# and list), so no grant of ours.
resource "google_project_iam_member" "functions_vertex" {
  count   = var.tracking_vertex ? 1 : 0
  project = var.project_id
  role    = "roles/aiplatform.user"
  member  = google_service_account.functions.member
}

resource "google_pubsub_topic_iam_member" "trainer_watch" {
  for_each = local.trainer_principals
  topic    = google_pubsub_topic.watch.id
  role     = "roles/pubsub.publisher"
  member   = each.value
}

# Datasets staged in buckets of their own (gs:// dataset ids): the trainer reads the shards (a bucket's root is
# read as the bucket, storage.buckets.get); the functions list them (object generations), so a nightly with no
# new shard is skipped. Read only, both.
locals {
  dataset_readers = merge(
    { for bucket in var.dataset_buckets : "functions ${bucket}" => { bucket = bucket, member = google_service_account.functions.member, role = "roles/storage.objectViewer" } },
    {
      for triple in setproduct(keys(local.trainer_principals), var.dataset_buckets, local.dataset_roles) :
      join(" ", triple) => { bucket = triple[1], member = local.trainer_principals[triple[0]], role = triple[2] }
    },
  )
}

resource "google_storage_bucket_iam_member" "dataset_readers" {
  for_each = local.dataset_readers
  bucket   = each.value.bucket
  role     = each.value.role
  member   = each.value.member
}

# Builds. Since mid-2024 new projects run Cloud Build as the Compute Engine default service account with no
# roles (https://cloud.google.com/build/docs/cloud-build-service-account-updates), so each build has its own.
# The functions' build, as Google's "Configure a custom build service account" pages list it (Cloud Run
# functions and Cloud Run source deploys): build logs, the function image in gcf-artifacts (a repository Cloud
# Functions creates, hence the project), and the source archive.
resource "google_service_account" "function_build" {
  account_id   = "${var.name}-function-build"
  display_name = "raytune Cloud Functions build"
}

resource "google_project_iam_member" "function_build" {
  # vs cloudfunctions2_basic_builder: grant roles/storage.objectAdmin to function-build: read of gcf-v2-sources alone (function_build_sources below), not every bucket's objects to write
  # vs cloudfunctions2_basic_gcs: grant roles/artifactregistry.reader to functions: the runtime never pulls its image; Cloud Run's service agent does (functions/core/permissions.py)
  # vs cloudfunctions2_basic_gcs: order after google_project_iam_member: the functions wait until every grant their build needs is effective (terraform_data.function_build_access); grants need no order among them
  for_each = toset(["roles/logging.logWriter", "roles/artifactregistry.writer"])
  project  = var.project_id
  role     = each.value
  member   = google_service_account.function_build.member
}

# A gen2 build never reads storage_source where we put it: Cloud Functions (its service agent) copies the archive
# into a bucket of its own, gcf-v2-sources-<PROJECT_NUMBER>-<REGION>, and Cloud Build downloads it from there as
# the build service account ("Access to bucket gcf-v2-sources-... denied. You must grant Storage Object Viewer
# permission to ...": hashicorp/terraform-provider-google#20571, GoogleCloudPlatform/terraform-google-cloud-functions#129).
# The provider's example (magic-modules cloudfunctions2_basic_builder) grants object access project-wide. That
# bucket does not exist before the first function is created, so no bucket-level grant can name it on a new
# project; a project-level grant with an IAM Condition on that one bucket's name can, and leaves every other
# bucket (run records, configs) out of the build's reach. The price: the name is Google's convention, held in
# functions/core/permissions.py with its source; `raytune doctor` asks Google whether the build can read it.
locals {
  function_sources_bucket = "projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-${var.region}"
  # Where the apply's access probe (function_build_access below) stages its source, read under the same grant.
  function_build_probe = "function-build-probe"
  # IAM Conditions on Cloud Storage match resource.name (projects/_/buckets/B[/objects/O]): each conditioned grant
  # here reaches one name and everything under it, in this one form; the function build's also the probe's prefix;
  # the image cache builder's everything under image-cache/ (Daisy's folders there are never read as files).
  within = merge(
    {
      for prefix in values(local.trainer_runs_bucket) : prefix => join(" || ", [
        "resource.name == \"${local.runs_objects}/${prefix}\"",
        "resource.name.startsWith(\"${local.runs_objects}/${prefix}/\")",
      ])
    },
    {
      function_sources = join(" || ", [
        "resource.name == \"${local.function_sources_bucket}\"",
        "resource.name.startsWith(\"${local.function_sources_bucket}/\")",
        "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.build.name}/objects/${local.function_build_probe}/\")",
      ])
    },
    { image_cache = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.build.name}/objects/image-cache/\")" },
  )
}

resource "google_project_iam_member" "function_build_sources" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = google_service_account.function_build.member
  condition {
    title       = "raytune-function-sources-only"
    description = "Cloud Functions' copy of the source archive, read by the function build"
    expression  = local.within.function_sources
  }
}

# IAM grants take effect after they are written: typically within 2 minutes, possibly 7 or more
# (https://cloud.google.com/iam/docs/access-change-propagation). A function whose build starts before then is
# refused its source ("Access to bucket gcf-v2-sources-... denied") and left FAILED: the provider's own example
# waits a fixed 60 s and still fails about half the time in its CI (hashicorp/terraform-provider-google#20571).
# So the apply waits for the fact, not for a time: scripts/await-function-build-access runs a one-step build as
# the build identity, its source staged under function-build-probe/ (read under the very binding that reads
# gcf-v2-sources, so both are effective together; logs written as the real build writes them), again every
# 15 s until Google lets it fetch and log, and only then are the functions created. Its cost: one build of a
# few seconds when the grants are already effective, else the propagation itself; it gives up after 20 minutes
# naming what it was refused. It runs again whenever one of the grants is replaced. Runs where `terraform apply`
# runs, as whoever runs it (gcloud's credentials): cloudbuild.builds.create, iam.serviceAccounts.actAs on the
# build identity and object create on the build bucket, all in roles/owner and roles/editor.
resource "terraform_data" "function_build_access" {
  triggers_replace = merge(
    { for role, grant in google_project_iam_member.function_build : role => grant.id },
    { sources = google_project_iam_member.function_build_sources.id },
  )
  provisioner "local-exec" {
    interpreter = ["bash"]
    command     = "${path.module}/scripts/await-function-build-access"
    environment = {
      PROJECT       = var.project_id
      REGION        = var.region
      BUILD_ACCOUNT = google_service_account.function_build.email
      STAGING       = "gs://${google_storage_bucket.build.name}/${local.function_build_probe}"
    }
  }
}

# `raytune image`: its build reads the source gcloud staged in the build bucket, nothing else of storage.
resource "google_storage_bucket_iam_member" "build_source" {
  bucket = google_storage_bucket.build.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.image_build.member
}

# `raytune image`: reads the source gcloud staged in the build bucket, pushes to the trainer repository, logs to
# Cloud Logging (a build as a user-chosen service account must: image/cloudbuild.yaml CLOUD_LOGGING_ONLY).
resource "google_service_account" "image_build" {
  account_id   = "${var.name}-image-build"
  display_name = "raytune trainer image build"
}

resource "google_artifact_registry_repository_iam_member" "image_build_push" {
  location   = google_artifact_registry_repository.trainer.location
  repository = google_artifact_registry_repository.trainer.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.image_build.member
}

resource "google_project_iam_member" "image_build_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = google_service_account.image_build.member
}

# The people who run the CLI (raytune submit, runs, status, logs, cancel, image). `raytune logs` reads pod
# logs, which no read-only GKE role grants (container.viewer lacks container.pods.getLogs): a custom role adds
# exactly that, instead of container.developer and the Secrets it could read.
resource "google_project_iam_custom_role" "pod_logs" {
  role_id     = "${replace(var.name, "-", "_")}_pod_logs"
  title       = "raytune pod logs"
  description = "Read the logs of pods (raytune logs); nothing else."
  permissions = ["container.pods.getLogs"]
}

# `raytune doctor` evaluates the trainer's Workload Identity grants from the policies themselves: Policy
# Troubleshooter does not take a principal:// identifier (its AccessTuple.principal). Reading a policy is all this
# role does, on the project and, through it, on its buckets and topics: the allow policies, and the deny policies
# IAM evaluates first (a folder's or organization's are read where the caller holds these there).
resource "google_project_iam_custom_role" "policy_reader" {
  role_id     = "${replace(var.name, "-", "_")}_policy_reader"
  title       = "raytune policy reader"
  description = "Read the allow, deny and org policies of the project, its buckets and topics (raytune doctor); nothing else."
  permissions = [
    "resourcemanager.projects.getIamPolicy", "storage.buckets.getIamPolicy", "pubsub.topics.getIamPolicy",
    "iam.denypolicies.list", "iam.denypolicies.get", "orgpolicy.policy.get",
  ]
}

# `raytune doctor` reads the disk image a config's cluster.image_cache names (its status and the labels that say
# which build of the worker image it holds): the image's metadata only, not its use (compute.imageUser would add
# compute.images.useReadOnly, making disks from it).
resource "google_project_iam_custom_role" "image_reader" {
  role_id     = "${replace(var.name, "-", "_")}_image_reader"
  title       = "raytune disk image reader"
  description = "Read the metadata of the project's disk images (raytune doctor: the image cache); nothing else."
  permissions = ["compute.images.get"]
}

locals {
  # Keys are labels known at plan time; the custom role's name is known only after it is created.
  operator_bucket_roles = {
    configs      = { bucket = google_storage_bucket.configs.name, role = "roles/storage.objectUser" }
    runs         = { bucket = google_storage_bucket.runs.name, role = "roles/storage.objectViewer" }
    build        = { bucket = google_storage_bucket.build.name, role = "roles/storage.objectUser" }
    build_bucket = { bucket = google_storage_bucket.build.name, role = "roles/storage.legacyBucketReader" }
  }
  operator_project_roles = {
    viewer = "roles/container.viewer"
    builds = "roles/cloudbuild.builds.editor"
    logs   = google_project_iam_custom_role.pod_logs.name
    policy = google_project_iam_custom_role.policy_reader.name
    images = google_project_iam_custom_role.image_reader.name
  }
  operator_topics = { launch = google_pubsub_topic.launch.id, watch = google_pubsub_topic.watch.id }
}

resource "google_storage_bucket_iam_member" "operators" {
  for_each = { for pair in setproduct(var.operators, keys(local.operator_bucket_roles)) : join(" ", pair) => merge(local.operator_bucket_roles[pair[1]], { member = pair[0] }) }
  bucket   = each.value.bucket
  role     = each.value.role
  member   = each.value.member
}

resource "google_pubsub_topic_iam_member" "operators" {
  for_each = { for pair in setproduct(var.operators, keys(local.operator_topics)) : join(" ", pair) => { member = pair[0], topic = local.operator_topics[pair[1]] } }
  topic    = each.value.topic
  role     = "roles/pubsub.publisher"
  member   = each.value.member
}

resource "google_project_iam_member" "operators" {
  for_each = { for pair in setproduct(var.operators, keys(local.operator_project_roles)) : join(" ", pair) => { member = pair[0], role = local.operator_project_roles[pair[1]] } }
  project  = var.project_id
  role     = each.value.role
  member   = each.value.member
}

# `gcloud builds submit --service-account` acts as the image build's identity.
resource "google_service_account_iam_member" "operators_image_build" {
  for_each           = toset(var.operators)
  service_account_id = google_service_account.image_build.name
  role               = "roles/iam.serviceAccountUser"
  member             = each.value
}
