"""Who calls which Google API and the IAM permission each call needs: one table for the whole product (the
functions, the trainer and the libraries under it, the GKE nodes, the two builds, the event deliveries, the
service agents, and the person at the CLI). Terraform grants what this table asks for (terraform/iam.tf);
tests/contract/test_iam_grants.py holds that, for every setting of the variables that change grants, against
Google's published permission lists of the roles granted, and tests/contract/test_iam_wire.py runs the real
clients through a GCS that enforces IAM and holds that every storage call they make is in here.
`raytune permissions` prints it, for operators who grant by hand (an existing cluster, a locked-down org).

Resources are where a grant is made: `project`, `bucket:runs`, `bucket:configs`, `bucket:datasets` (each of
Terraform's dataset_buckets), `bucket:policy` (each of policy_buckets), `bucket:build` (Cloud Build's
source staging), `topic:<name>`, `subscription:push`, `secret:hf-token`, `repository:trainer`,
`service:functions` (the functions' Cloud Run services), `service-account:<name>`, and what Google creates in
the project for us (GOOGLE_RESOURCES: `bucket:gcf-sources`, `repository:gcf-artifacts`).

Google's services act on the project too, as their service agents: their rows carry the `source` of each fact
(Google's documents, the provider's examples and issue tracker), and the roles Google grants them when their API
is enabled are GOOGLE_GRANTS, so the grants test covers them like Terraform's own.

Not here, because they call no Google API: `datasets` and `huggingface_hub` (the Hugging Face Hub, with
HF_TOKEN). google-cloud-storage's
background bucket-metadata reads are switched off (functions/adapters/gcs.py), so they need nothing either.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

FUNCTIONS = "functions"  # the launch and watch functions' runtime service account
TRAINER = "trainer"  # Ray pods (head, workers, KubeRay's submitter): Workload Identity of the namespace's default KSA
NODES = "nodes"  # the GKE nodes' service account (Compute Engine default): image pulls
IMAGE_BUILD = "image-build"  # Cloud Build running `raytune image`
IMAGE_CACHE_VM = "image-cache-vm"  # the VM gke-disk-image-builder starts (`raytune image --cache`): pulls the image
FUNCTION_BUILD = "function-build"  # Cloud Build building the functions' source (Cloud Functions gen2)
TRIGGER = "trigger"  # Eventarc and Pub/Sub push deliveries to the functions
STORAGE_AGENT = "storage-agent"  # the Cloud Storage service agent: publishes the configs bucket's object events
PUBSUB_AGENT = "pubsub-agent"  # the Pub/Sub service agent: push OIDC tokens, dead letters
OPERATOR = "operator"  # a person at the CLI (Terraform's `operators`)
FUNCTIONS_AGENT = "functions-agent"  # the Cloud Functions service agent: copies the source, starts the build
BUILD_AGENT = "cloudbuild-agent"  # the Cloud Build service agent: runs a build as its chosen service account
EVENTARC_AGENT = "eventarc-agent"  # the Eventarc service agent: sets up a storage trigger's transport
RUN_AGENT = "run-agent"  # the Cloud Run service agent: deploys a gen2 function's service from its image
GKE_AGENT = "gke-agent"  # the Kubernetes Engine service agent: creates Autopilot's nodes
SCHEDULER_AGENT = "scheduler-agent"  # the Cloud Scheduler service agent: publishes the jobs' messages
VERTEX_AGENT = "vertex-agent"  # the Vertex AI service agent: reads a registered model version's files

IDENTITIES = (
    FUNCTIONS,
    TRAINER,
    NODES,
    IMAGE_BUILD,
    IMAGE_CACHE_VM,
    FUNCTION_BUILD,
    TRIGGER,
    STORAGE_AGENT,
    PUBSUB_AGENT,
    FUNCTIONS_AGENT,
    BUILD_AGENT,
    EVENTARC_AGENT,
    RUN_AGENT,
    GKE_AGENT,
    SCHEDULER_AGENT,
    VERTEX_AGENT,
    OPERATOR,
)
# Terraform's switches that add uses (variables of terraform/variables.tf, off by default).
CREATE_CLUSTERS = "functions_create_clusters"
IMAGE_CACHE = "image_cache"
TRACK_VERTEX = "tracking_vertex"
SWITCHES = (CREATE_CLUSTERS, IMAGE_CACHE, TRACK_VERTEX)


@dataclass(frozen=True)
class Use:
    identity: str
    permission: str
    resource: str
    call: str  # the API call, as the code or the library under it makes it
    why: str
    when: str | None = None  # a Terraform switch the use depends on
    source: str = ""  # where Google says so, for what Google's services do or create


def _uses(
    identity: str, resource: str, call: str, why: str, *permissions: str, when: str | None = None, source: str = ""
) -> list[Use]:
    return [Use(identity, p, resource, call, why, when, source) for p in permissions]


# What a tracked run asks of Vertex AI, request by request (tests/fakes/vertex.py records them).
_VERTEX_EXPERIMENTS = (
    "aiplatform.metadataStores.get",
    "aiplatform.metadataStores.create",
    "aiplatform.contexts.get",
    "aiplatform.contexts.create",
    "aiplatform.contexts.update",
    "aiplatform.contexts.addContextChildren",
    "aiplatform.contexts.addContextArtifactsAndExecutions",
    "aiplatform.artifacts.get",
    "aiplatform.artifacts.create",
    "aiplatform.tensorboards.list",
    "aiplatform.tensorboards.create",
    "aiplatform.tensorboards.get",
    "aiplatform.tensorboardExperiments.get",
    "aiplatform.tensorboardExperiments.create",
    "aiplatform.tensorboardRuns.get",
    "aiplatform.tensorboardRuns.create",
    "aiplatform.tensorboardRuns.write",
    "aiplatform.tensorboardTimeSeries.list",
    "aiplatform.tensorboardTimeSeries.create",
)

# -- What Google's services create and act as ---------------------------------------------------------------

_GCF_BUILD_DOCS = "https://cloud.google.com/functions/docs/securing/build-custom-sa"
_IAM_PROPAGATION = (
    "https://cloud.google.com/iam/docs/access-change-propagation (typically 2 minutes, 7 or more possible); "
    "hashicorp/terraform-provider-google#20571 (a fixed 60 s wait fails about half the time)"
)
_GCF_SOURCES_ISSUES = (
    "hashicorp/terraform-provider-google#20571; GoogleCloudPlatform/terraform-google-cloud-functions#129; "
    "magic-modules cloudfunctions2_basic_builder.tf.tmpl (grants storage object read, waits 60 s)"
)
_SERVICE_AGENTS_DOCS = "https://cloud.google.com/iam/docs/service-agents"
_DISK_IMAGE_BUILDER = (
    "ai-on-gke/tools@dd191890 gke-disk-image-builder (imager.go, script/startup.sh, README: the VM's account reads "
    "the GCS path's startup script); GoogleCloudPlatform/compute-daisy@6a3c47dc (its go.mod's Daisy)"
)


@dataclass(frozen=True)
class GoogleResource:
    """Something Google creates in the project the first time one of its services needs it."""

    resource: str  # this table's word for it
    name: str  # its name, with {number} (the project number), {project} and {region}
    created_by: str  # the identity that creates it
    source: str


GOOGLE_RESOURCES = (
    GoogleResource(
        "bucket:gcf-sources",
        "gcf-v2-sources-{number}-{region}",
        FUNCTIONS_AGENT,
        "Cloud Functions gen2 copies each storage_source archive here at deploy and builds from the copy: "
        + _GCF_SOURCES_ISSUES,
    ),
    GoogleResource(
        "repository:gcf-artifacts",
        "projects/{project}/locations/{region}/repositories/gcf-artifacts",
        FUNCTIONS_AGENT,
        "the Artifact Registry repository gen2 builds push function images to: " + _GCF_BUILD_DOCS,
    ),
)


@dataclass(frozen=True)
class ServiceAgent:
    identity: str
    email: str  # with {number}: the project number
    api: str  # enabling it creates the agent and grants it `role` on the project
    role: str
    source: str


SERVICE_AGENTS = (
    ServiceAgent(
        STORAGE_AGENT,
        "service-{number}@gs-project-accounts.iam.gserviceaccount.com",
        "storage.googleapis.com",
        "",  # no role of its own: Terraform grants what storage triggers need
        "https://cloud.google.com/storage/docs/projects#service-agents",
    ),
    ServiceAgent(
        PUBSUB_AGENT,
        "service-{number}@gcp-sa-pubsub.iam.gserviceaccount.com",
        "pubsub.googleapis.com",
        # Token creation came with this role only in projects created after 8 April 2021: Terraform grants it on
        # the trigger identity all the same (iam.tf).
        "roles/pubsub.serviceAgent",
        "https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions",
    ),
    ServiceAgent(
        FUNCTIONS_AGENT,
        "service-{number}@gcf-admin-robot.iam.gserviceaccount.com",
        "cloudfunctions.googleapis.com",
        "roles/cloudfunctions.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/functions/docs/concepts/iam#cloud_functions_service_agent",
    ),
    ServiceAgent(
        BUILD_AGENT,
        "service-{number}@gcp-sa-cloudbuild.iam.gserviceaccount.com",
        "cloudbuild.googleapis.com",
        "roles/cloudbuild.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/build/docs/cloud-build-service-account",
    ),
    ServiceAgent(
        EVENTARC_AGENT,
        "service-{number}@gcp-sa-eventarc.iam.gserviceaccount.com",
        "eventarc.googleapis.com",
        "roles/eventarc.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/eventarc/docs/roles-permissions",
    ),
    ServiceAgent(
        RUN_AGENT,
        "service-{number}@serverless-robot-prod.iam.gserviceaccount.com",
        "run.googleapis.com",
        "roles/run.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/run/docs/securing/service-identity",
    ),
    ServiceAgent(
        GKE_AGENT,
        "service-{number}@container-engine-robot.iam.gserviceaccount.com",
        "container.googleapis.com",
        "roles/container.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts",
    ),
    ServiceAgent(
        SCHEDULER_AGENT,
        "service-{number}@gcp-sa-cloudscheduler.iam.gserviceaccount.com",
        "cloudscheduler.googleapis.com",
        "roles/cloudscheduler.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/scheduler/docs/http-target-auth",
    ),
    ServiceAgent(
        VERTEX_AGENT,
        "service-{number}@gcp-sa-aiplatform.iam.gserviceaccount.com",
        "aiplatform.googleapis.com",
        "roles/aiplatform.serviceAgent",
        _SERVICE_AGENTS_DOCS + "; https://cloud.google.com/vertex-ai/docs/general/access-control#service-agents",
    ),
)


def agent(identity: str) -> ServiceAgent:
    return next(a for a in SERVICE_AGENTS if a.identity == identity)


_OBJECT_WRITE = ("storage.objects.create", "storage.objects.delete")  # replacing an object needs delete too
_STORAGE_PATH = (
    "storage.objects.get",
    "storage.objects.list",
    *_OBJECT_WRITE,
    "storage.buckets.get",  # pyarrow's create_dir reads the bucket when no parent folder marker exists
)

USES: tuple[Use, ...] = tuple(
    # The launch and watch functions.
    _uses(
        FUNCTIONS,
        "bucket:runs",
        "GCS objects get/insert/delete/list (google-cloud-storage)",
        "run records, allocations, champions, nightly pointers (compare-and-swap), result.json",
        "storage.objects.get",
        "storage.objects.list",
        *_OBJECT_WRITE,
    )
    + _uses(
        FUNCTIONS,
        "bucket:runs",
        "GCS objects.patch (google-cloud-storage)",
        "an active run's marker notes its record's generation, so the watch tick lists instead of reading",
        "storage.objects.update",
    )
    + _uses(FUNCTIONS, "bucket:configs", "GCS objects.get", "an uploaded run config", "storage.objects.get")
    + _uses(
        FUNCTIONS,
        "bucket:policy",
        "GCS objects.get",
        "config_uri in a policy bucket; result.json under a storage_path there",
        "storage.objects.get",
    )
    + _uses(
        FUNCTIONS,
        "bucket:datasets",
        "GCS objects.list",
        "a nightly's dataset versions (generations)",
        "storage.objects.list",
    )
    + _uses(
        FUNCTIONS,
        "topic:run-events",
        "Pub/Sub publish",
        "run-finished, run-state and leak events",
        "pubsub.topics.publish",
    )
    + _uses(
        FUNCTIONS,
        "secret:hf-token",
        "Secret Manager versions.access",
        "HF_TOKEN, bound at instance start (secret_environment_variables)",
        "secretmanager.versions.access",
    )
    + _uses(
        FUNCTIONS,
        "project",
        "ClusterManager.GetCluster; the cluster's API server",
        "find the run's cluster; GKE authorizes every Kubernetes call with container.clusters.get",
        "container.clusters.get",
    )
    + _uses(
        FUNCTIONS,
        "project",
        "Kubernetes server-side apply of Secret and ConfigMap",
        "the HF token Secret and the trainer-code ConfigMap",
        "container.secrets.create",
        "container.secrets.update",
        "container.configMaps.create",
        "container.configMaps.update",
    )
    + _uses(
        FUNCTIONS,
        "project",
        "Kubernetes RayCluster/RayJob create, apply, get, list, patch, delete; ComputeClass apply (custom objects)",
        "the RayCluster and the RayJob, scaling, cancels, the leak sweep, idle teardown, asking KubeRay to look at "
        "a RayCluster again (an annotation); a capacity list's ComputeClass (cluster-scoped)",
        "container.thirdPartyObjects.create",
        "container.thirdPartyObjects.update",
        "container.thirdPartyObjects.get",
        "container.thirdPartyObjects.list",
        "container.thirdPartyObjects.delete",
    )
    + _uses(
        FUNCTIONS,
        "project",
        "Kubernetes pods and events list, nodes get",
        "why a job waits (FailedScheduling, image pulls, crash loops); what took a failed job's nodes "
        "(disruption conditions, evictions); which capacity a run's nodes came from (their labels)",
        "container.pods.list",
        "container.events.list",
        "container.nodes.get",
    )
    + _uses(
        FUNCTIONS,
        "project",
        "ClusterManager.CreateCluster, UpdateCluster",
        "create a missing Autopilot cluster, enable the Ray operator add-on",
        "container.clusters.create",
        "container.clusters.update",
        when=CREATE_CLUSTERS,
    )
    + _uses(
        FUNCTIONS,
        "service-account:compute-default",
        "ClusterManager.CreateCluster",
        "a new cluster's nodes run as the Compute Engine default service account",
        "iam.serviceAccounts.actAs",
        when=CREATE_CLUSTERS,
    )
    # The trainer in the Ray pods.
    + _uses(
        TRAINER,
        "bucket:runs",
        "pyarrow GcsFileSystem under Ray Train's StorageContext, checkpoint upload and prune; result.json, "
        "report.html, adapter, merged model; the champion's adapter",
        "storage_path under the runs bucket (the default); objects under checkpoints/ only, and datasets/ to read "
        "(IAM conditions: the run records beside them are the functions')",
        *_STORAGE_PATH,
    )
    + _uses(TRAINER, "bucket:policy", "as for bucket:runs", "a storage_path in a policy bucket", *_STORAGE_PATH)
    + _uses(
        TRAINER,
        "bucket:datasets",
        "pyarrow GcsFileSystem get_file_info and copy_files",
        "list and read a gs:// dataset's shards (a bucket's root is read as the bucket)",
        "storage.objects.get",
        "storage.objects.list",
        "storage.buckets.get",
    )
    + _uses(TRAINER, "topic:watch", "Pub/Sub publish", "the completion notice", "pubsub.topics.publish")
    + _uses(
        TRAINER,
        "project",
        "google-cloud-aiplatform ExperimentRun (REST): aiplatform.init, ExperimentRun.create / get, log_params, "
        "log_metrics, log_time_series_metrics, update_state",
        "tracking.vertex: the default metadata store, the experiment and run contexts, the experiment's backing "
        "TensorBoard (the client makes the project's default one), its run and time series, the curves",
        *_VERTEX_EXPERIMENTS,
        when=TRACK_VERTEX,
        source="the requests google-cloud-aiplatform 2.7.0 sends, as tests/integration/test_vertex_tracking.py plays them",
    )
    # A line's champion in the Vertex AI Model Registry (tracking.vertex.serving_image).
    + _uses(
        FUNCTIONS,
        "project",
        "google-cloud-aiplatform ModelServiceClient (REST): list_models, list_model_versions, get_model, "
        "upload_model, merge_version_aliases",
        "the champion step: the line's model found or made, the champion's version registered once, its alias moved",
        "aiplatform.models.list",
        "aiplatform.models.get",
        "aiplatform.models.upload",
        "aiplatform.models.update",
        when=TRACK_VERTEX,
    )
    + _uses(
        VERTEX_AGENT,
        "bucket:runs",
        "Vertex AI reading a model version's artifact_uri",
        "a champion version's files (its merged model or adapter under checkpoints/)",
        "storage.objects.get",
        "storage.objects.list",
        when=TRACK_VERTEX,
        source="https://cloud.google.com/vertex-ai/docs/general/access-control#service-agents (the Vertex AI Service "
        "Agent's roles/aiplatform.serviceAgent holds both in the project; a bucket in another project needs a grant)",
    )
    # The GKE nodes.
    + _uses(
        NODES,
        "repository:trainer",
        "image pull",
        "the trainer image (`raytune image`) for dependencies: image",
        "artifactregistry.repositories.downloadArtifacts",
    )
    # `raytune image`: Cloud Build as its own service account.
    + _uses(IMAGE_BUILD, "bucket:build", "GCS objects.get", "the source archive gcloud staged", "storage.objects.get")
    + _uses(
        IMAGE_BUILD,
        "repository:trainer",
        "docker push",
        "the built image",
        "artifactregistry.repositories.uploadArtifacts",
        "artifactregistry.repositories.downloadArtifacts",
    )
    + _uses(
        IMAGE_BUILD,
        "project",
        "Cloud Logging write",
        "the build's log (CLOUD_LOGGING_ONLY)",
        "logging.logEntries.create",
    )
    # `raytune image --cache`: the same build runs Google's gke-disk-image-builder (image/cache.cloudbuild.yaml),
    # whose Daisy workflow makes a VM with a blank disk, waits for the VM to unpack the image onto it, makes a
    # disk image of that disk and deletes the rest. Calls read in the builder (imager.go) and in Daisy at the
    # version its go.mod pins (compute-daisy@6a3c47dc: validation lists, create, wait, cleanup).
    + _uses(
        IMAGE_BUILD,
        "project",
        "gcloud compute images describe",
        "is the digest's disk image made already (a second build of one image ends at once)",
        "compute.images.get",
        when=IMAGE_CACHE,
    )
    + _uses(
        IMAGE_BUILD,
        "project",
        "Daisy validation: Projects.Get; Zones, MachineTypes, Networks, Disks, Instances, Images list",
        "the workflow's resources exist, and the names it creates do not",
        "compute.projects.get",
        "compute.zones.list",
        "compute.machineTypes.list",
        "compute.networks.list",
        "compute.disks.list",
        "compute.instances.list",
        "compute.images.list",
        when=IMAGE_CACHE,
        source=_DISK_IMAGE_BUILDER,
    )
    + _uses(
        IMAGE_BUILD,
        "project",
        "Daisy CreateDisks, CreateInstances (boot disk from debian-cloud, the blank disk attached, startup-script-url "
        "metadata, the VM's service account, an external IP), GetSerialPortOutput, DetachDisk, CreateImages "
        "(labelled), cleanup; each operation waited on",
        "make the cache disk image of the pushed trainer image",
        "compute.disks.create",
        "compute.disks.get",
        "compute.disks.use",
        "compute.disks.useReadOnly",
        "compute.disks.delete",
        "compute.instances.create",
        "compute.instances.get",
        "compute.instances.setMetadata",
        "compute.instances.setServiceAccount",
        "compute.instances.getSerialPortOutput",
        "compute.instances.detachDisk",
        "compute.instances.delete",
        "compute.subnetworks.use",
        "compute.subnetworks.useExternalIp",
        "compute.images.create",
        "compute.images.setLabels",
        "compute.zoneOperations.get",
        "compute.globalOperations.get",
        when=IMAGE_CACHE,
        source=_DISK_IMAGE_BUILDER,
    )
    + _uses(
        IMAGE_BUILD,
        "service-account:image-cache",
        "Daisy CreateInstances (serviceAccounts)",
        "the builder's VM runs as the image cache's service account",
        "iam.serviceAccounts.actAs",
        when=IMAGE_CACHE,
    )
    + _uses(
        IMAGE_BUILD,
        "bucket:build",
        "Daisy: sources upload, its log object rewritten as it grows",
        "the VM's startup script and the workflow's log under image-cache/",
        *_OBJECT_WRITE,
        when=IMAGE_CACHE,
        source=_DISK_IMAGE_BUILDER,
    )
    # The builder's VM: its guest agent fetches the startup script, which pulls the image with the VM's token.
    + _uses(
        IMAGE_CACHE_VM,
        "bucket:build",
        "the guest agent's startup-script-url fetch",
        "the startup script Daisy staged under image-cache/",
        "storage.objects.get",
        when=IMAGE_CACHE,
        source=_DISK_IMAGE_BUILDER,
    )
    + _uses(
        IMAGE_CACHE_VM,
        "repository:trainer",
        "image pull (containerd, --image-pull-auth=ServiceAccountToken)",
        "the trainer image's layers, unpacked onto the cache disk",
        "artifactregistry.repositories.downloadArtifacts",
        when=IMAGE_CACHE,
        source=_DISK_IMAGE_BUILDER,
    )
    # The functions' own build (Google: "Configure a custom build service account").
    + _uses(
        FUNCTION_BUILD,
        "bucket:gcf-sources",
        "Cloud Functions gen2 build: fetch",
        "the source archive, as Cloud Functions copied it into its own bucket (not the build bucket)",
        "storage.objects.get",
        source=_GCF_SOURCES_ISSUES,
    )
    + _uses(
        FUNCTION_BUILD,
        "bucket:build",
        "the apply's access probe: fetch",
        "a one-step build's source under function-build-probe/, read under the grant that reads gcf-v2-sources "
        "(terraform/scripts/await-function-build-access: the functions are created once it is let in)",
        "storage.objects.get",
        source=_IAM_PROPAGATION,
    )
    + _uses(
        FUNCTION_BUILD,
        "repository:gcf-artifacts",
        "Cloud Functions gen2 build: docker push",
        "the function's image",
        "artifactregistry.repositories.uploadArtifacts",
        "artifactregistry.repositories.downloadArtifacts",
        source=_GCF_BUILD_DOCS,
    )
    + _uses(
        FUNCTION_BUILD,
        "project",
        "Cloud Functions gen2 build: Cloud Logging write",
        "the build log",
        "logging.logEntries.create",
        source=_GCF_BUILD_DOCS,
    )
    # Google's service agents, acting on the project for us (granted by Google: GOOGLE_GRANTS, or by Terraform).
    + _uses(
        FUNCTIONS_AGENT,
        "bucket:build",
        "Cloud Functions gen2 deploy: copy storage_source",
        "reads the functions' source archive where Terraform uploaded it",
        "storage.objects.get",
        source=_GCF_SOURCES_ISSUES,
    )
    + _uses(
        FUNCTIONS_AGENT,
        "project",
        "Cloud Functions gen2 deploy",
        "creates gcf-v2-sources and gcf-artifacts on the first deploy, starts the build, deploys the service",
        "storage.buckets.create",
        "artifactregistry.repositories.create",
        "cloudbuild.builds.create",
        "run.services.create",
        source=_SERVICE_AGENTS_DOCS,
    )
    + _uses(
        FUNCTIONS_AGENT,
        "bucket:gcf-sources",
        "Cloud Functions gen2 deploy: copy storage_source",
        "writes the copy the build reads",
        "storage.objects.create",
        source=_GCF_SOURCES_ISSUES,
    )
    + _uses(
        BUILD_AGENT,
        "service-account:function-build",
        "Cloud Build: a build as a user-specified service account",
        "the functions' builds run as their own identity",
        "iam.serviceAccounts.getAccessToken",
        source="https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts",
    )
    + _uses(
        BUILD_AGENT,
        "service-account:image-build",
        "Cloud Build: a build as a user-specified service account",
        "raytune image's builds run as their own identity",
        "iam.serviceAccounts.getAccessToken",
        source="https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts",
    )
    + _uses(
        RUN_AGENT,
        "repository:gcf-artifacts",
        "Cloud Run: deploy a revision",
        "pulls the function's image",
        "artifactregistry.repositories.downloadArtifacts",
        source="https://cloud.google.com/run/docs/deploying#other-projects",
    )
    + _uses(
        EVENTARC_AGENT,
        "bucket:configs",
        "Eventarc: create a Cloud Storage trigger",
        "the configs bucket's Pub/Sub notification (Eventarc's transport)",
        "storage.buckets.update",
        source="https://cloud.google.com/eventarc/docs/run/create-trigger-storage-gcloud",
    )
    + _uses(
        EVENTARC_AGENT,
        "project",
        "Eventarc: create a trigger",
        "the trigger's transport topic and push subscription",
        "pubsub.topics.create",
        "pubsub.subscriptions.create",
        source=_SERVICE_AGENTS_DOCS,
    )
    + _uses(
        EVENTARC_AGENT,
        "service-account:trigger",
        "Eventarc: deliver as the trigger's service account",
        "the OIDC token of each storage event delivery",
        "iam.serviceAccounts.getOpenIdToken",
        source="https://cloud.google.com/eventarc/docs/all-roles-permissions",
    )
    + _uses(
        GKE_AGENT,
        "project",
        "GKE Autopilot: node auto-provisioning",
        "creates the A4 nodes the RayCluster's worker groups ask for",
        "compute.instances.create",
        source=_SERVICE_AGENTS_DOCS,
    )
    + _uses(
        GKE_AGENT,
        "service-account:compute-default",
        "GKE Autopilot: node auto-provisioning",
        "the nodes run as the Compute Engine default service account",
        "iam.serviceAccounts.actAs",
        source=_SERVICE_AGENTS_DOCS,
    )
    + _uses(
        SCHEDULER_AGENT,
        "topic:watch",
        "Cloud Scheduler: Pub/Sub target",
        "the watch tick",
        "pubsub.topics.publish",
        source="https://cloud.google.com/scheduler/docs/schedule-run-cron-job-pubsub",
    )
    + _uses(
        SCHEDULER_AGENT,
        "topic:launch",
        "Cloud Scheduler: Pub/Sub target",
        "the nightly fine-tune",
        "pubsub.topics.publish",
        source="https://cloud.google.com/scheduler/docs/schedule-run-cron-job-pubsub",
    )
    # Event deliveries.
    + _uses(
        TRIGGER, "project", "Eventarc delivery", "the configs bucket's finalize events", "eventarc.events.receiveEvent"
    )
    + _uses(TRIGGER, "service:functions", "HTTP invoke", "every delivery to the three functions", "run.routes.invoke")
    + _uses(
        STORAGE_AGENT,
        "project",
        "Pub/Sub publish",
        "storage triggers: object events into Eventarc's topic",
        "pubsub.topics.publish",
        source="https://cloud.google.com/eventarc/docs/run/quickstart-storage#before-you-begin",
    )
    + _uses(
        PUBSUB_AGENT,
        "service-account:trigger",
        "IAM Credentials generateIdToken",
        "the OIDC token of each push delivery",
        "iam.serviceAccounts.getOpenIdToken",
        source="https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions",
    )
    + _uses(
        PUBSUB_AGENT,
        "topic:dead-letter",
        "Pub/Sub publish",
        "undeliverable messages after 10 attempts",
        "pubsub.topics.publish",
        source="https://cloud.google.com/pubsub/docs/handling-failures#grant_forwarding_permissions",
    )
    + _uses(
        PUBSUB_AGENT,
        "subscription:push",
        "Pub/Sub acknowledge",
        "a message moved to the dead letter topic is taken off its subscription",
        "pubsub.subscriptions.consume",
        source="https://cloud.google.com/pubsub/docs/handling-failures#grant_forwarding_permissions",
    )
    # A person at the CLI (Terraform grants these to its `operators`).
    + _uses(
        OPERATOR,
        "bucket:configs",
        "GCS objects.insert",
        "raytune submit uploads a config (a second upload of a name replaces it)",
        "storage.objects.create",
        "storage.objects.delete",
    )
    + _uses(
        OPERATOR,
        "bucket:runs",
        "GCS objects.get/list",
        "raytune runs, status, compare, --wait",
        "storage.objects.get",
        "storage.objects.list",
    )
    + _uses(
        OPERATOR,
        "project",
        "Resource Manager, Cloud Storage and Pub/Sub getIamPolicy",
        "raytune doctor: the trainer's Workload Identity grants, evaluated from the allow policies (Policy "
        "Troubleshooter does not take a principal:// identifier)",
        "resourcemanager.projects.getIamPolicy",
        "storage.buckets.getIamPolicy",
        "pubsub.topics.getIamPolicy",
        source="https://cloud.google.com/policy-intelligence/docs/reference/policytroubleshooter/rest/v3/AccessTuple",
    )
    + _uses(
        OPERATOR,
        "project",
        "Resource Manager projects.getAncestry; IAM v2 policies.listPolicies and getPolicy (kind denypolicies)",
        "raytune doctor: the folders and organization whose allow policies the project inherits, and the deny "
        "policies IAM evaluates before any allow policy (a folder's or organization's own are read where the caller "
        "holds these there; else the answer is unknown)",
        "resourcemanager.projects.get",
        "iam.denypolicies.list",
        "iam.denypolicies.get",
        source="https://cloud.google.com/resource-manager/reference/rest/v1/projects/getAncestry; "
        "https://cloud.google.com/iam/docs/deny-access (deny policies are evaluated first); "
        "https://cloud.google.com/iam/docs/reference/rest/v2/policies/listPolicies",
    )
    + _uses(
        OPERATOR,
        "project",
        "Org Policy v2 projects.policies.getEffectivePolicy (constraints/compute.vmExternalIpAccess)",
        "raytune doctor, before a cache build: whether the builder's VM may have the external IP it always gets",
        "orgpolicy.policy.get",
        when=IMAGE_CACHE,
        source="https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/projects.policies/"
        "getEffectivePolicy",
    )
    + _uses(
        OPERATOR,
        "project",
        "Compute images.get",
        "raytune doctor: the disk image a config's cluster.image_cache names, and which build it holds",
        "compute.images.get",
        source="https://cloud.google.com/compute/docs/reference/rest/v1/images/get",
    )
    + _uses(OPERATOR, "topic:launch", "Pub/Sub publish", "raytune submit --via-topic", "pubsub.topics.publish")
    + _uses(OPERATOR, "topic:watch", "Pub/Sub publish", "raytune cancel", "pubsub.topics.publish")
    + _uses(
        OPERATOR,
        "project",
        "ClusterManager.GetCluster; Kubernetes get/list and pod logs",
        "raytune status and logs: the RayJob, its pods, the driver log",
        "container.clusters.get",
        "container.thirdPartyObjects.get",
        "container.pods.list",
        "container.pods.getLogs",
        "container.events.list",
    )
    + _uses(
        OPERATOR,
        "bucket:build",
        "gcloud builds submit: source upload",
        "raytune image stages the Dockerfile's inputs",
        "storage.objects.create",
        "storage.objects.get",
        "storage.objects.list",
        "storage.buckets.get",
    )
    + _uses(
        OPERATOR,
        "project",
        "CloudBuild.CreateBuild",
        "raytune image",
        "cloudbuild.builds.create",
        "cloudbuild.builds.get",
    )
    + _uses(
        OPERATOR,
        "service-account:image-build",
        "CloudBuild.CreateBuild (serviceAccount)",
        "a build that runs as the image build's service account",
        "iam.serviceAccounts.actAs",
    )
)


def uses_of(identity: str, switches: Collection[str] = ()) -> list[Use]:
    """An identity's uses with these of SWITCHES on."""
    unknown = set(switches) - set(SWITCHES)
    if unknown:
        raise ValueError(f"not a Terraform switch of the permission table: {sorted(unknown)}")
    return [u for u in USES if u.identity == identity and (u.when is None or u.when in switches)]


def all_uses(switches: Collection[str] = ()) -> list[Use]:
    """Every identity's uses, identity by identity."""
    return [u for i in IDENTITIES for u in uses_of(i, switches)]


def table(uses: Iterable[Use]) -> str:
    """The uses (all_uses) as a table of text: identity, resource, permission, and what needs it."""
    rows = [("who", "on", "permission", "for")]
    rows += [(u.identity, u.resource, u.permission, u.why) for u in uses]
    widths = [max(len(row[c]) for row in rows) for c in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3] for row in rows
    )
