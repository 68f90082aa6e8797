variable "project_id" {
  description = "Google Cloud project that runs the controller."
  type        = string
}

variable "region" {
  description = "Region of the buckets, the functions and the first GKE cluster: the region of the A4 (B200) reservation. More regions: policy_regions."
  type        = string
  default     = "us-central1"
}

variable "data_location" {
  description = "Location of the runs bucket (records, checkpoints, staged models): a multi-region (US, EU, ASIA) or dual-region (NAM4, EUR4, ...) where runs move between regions, so a moved run resumes from its checkpoints without a copy. Empty: var.region. Chosen at the first apply: a bucket's location never changes (docs/regions.md)."
  type        = string
  default     = ""
}

variable "image_location" {
  description = "Location of the trainer image repository: a multi-region (us, europe, asia) where the clusters of several regions pull it. Empty: var.region."
  type        = string
  default     = ""
}

variable "name" {
  description = "Prefix of every resource name (buckets get the project id appended to be globally unique)."
  type        = string
  default     = "raytune"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name: lowercase letters, digits and '-', at most 21 characters."
  }
}

variable "function_source_zip" {
  description = "Path of the function source archive built by `raytune package` (no torch inside)."
  type        = string
  default     = "../build/raytune-functions.zip"
}

variable "hf_token_secret_id" {
  description = "Secret Manager secret holding the Hugging Face read token (add a version with gcloud; never in Terraform state)."
  type        = string
  default     = "raytune-hf-token"
}

variable "create_gke_cluster" {
  description = "Create the GKE Autopilot cluster with the Ray operator add-on here. If false, use an existing one (its Ray operator add-on enabled by hand, see docs/deploy.md) or set functions_create_clusters."
  type        = bool
  default     = true
}

variable "gke_cluster_name" {
  description = "GKE cluster name; run configs name it in cluster.gke_cluster."
  type        = string
  default     = "raytune"
}

variable "reservation" {
  description = "Name of the A4 GPU reservation every run uses (policy: a config cannot choose another); empty: configs choose."
  type        = string
  default     = ""
}

variable "functions_create_clusters" {
  description = "Allow the functions to create GKE clusters and enable the Ray operator add-on (roles/container.admin). If false they only use existing, ready clusters (roles/container.developer)."
  type        = bool
  default     = false
}

variable "image_cache" {
  description = "Let `raytune image --cache` make the trainer image's cache disk (GPU nodes' secondary boot disk, docs/gpu-start.md): the image build may create and delete VMs, disks and disk images (roles/compute.instanceAdmin.v1), and the builder's VM gets an account that reads the trainer image."
  type        = bool
  default     = false
}

variable "tracking_vertex" {
  description = "Let runs track in Vertex AI Experiments and TensorBoard in this project (tracking.vertex, docs/tracking.md): enables the Vertex AI API and grants the trainer Vertex AI User (roles/aiplatform.user)."
  type        = bool
  default     = false
}

variable "max_event_age_seconds" {
  description = "Deliveries older than this are recorded as rejected instead of launching (Cloud Functions retry for up to 24 h)."
  type        = number
  default     = 43200
}

variable "watch_schedule" {
  description = "Cron of the watch tick (reconciles runs, scales GPU workers down)."
  type        = string
  default     = "* * * * *"
}

variable "nightly_schedule" {
  description = "Cron of the nightly fine-tune."
  type        = string
  default     = "0 2 * * *"
}

variable "nightly_config_uri" {
  description = "gs:// URI of the run config the nightly fine-tune launches; empty: no nightly job. The nightly line \"nightly\" of nightly_lines, kept for deployments that set it."
  type        = string
  default     = ""
}

variable "nightly_lines" {
  description = "Nightly fine-tune lines, by name (the run of a night is <name>-<YYYYMMDD>): each its config's gs:// URI, and its own cron and time zone where it does not take nightly_schedule and time_zone. One scheduler job each."
  type = map(object({
    config_uri = string
    schedule   = optional(string)
    time_zone  = optional(string)
  }))
  default = {}
  validation {
    condition     = alltrue([for line in keys(var.nightly_lines) : can(regex("^[a-z]([-a-z0-9]{0,23}[a-z0-9])?$", line))])
    error_message = "Each nightly line's name is a DNS label of at most 25 characters (it names its runs)."
  }
  validation {
    condition     = alltrue([for spec in values(var.nightly_lines) : startswith(spec.config_uri, "gs://")])
    error_message = "Each nightly line's config_uri is a gs:// URI."
  }
}

variable "time_zone" {
  description = "Time zone of the scheduler jobs."
  type        = string
  default     = "Etc/UTC"
}

variable "node_hour_price" {
  description = "Price of one GPU node (an A4 machine) per hour, for each run's cost in its record and run-finished event (empty: no cost)."
  type        = string
  default     = ""
}

variable "price_currency" {
  description = "The currency node_hour_price(s) are in, shown beside every estimate and cost."
  type        = string
  default     = "USD"
  validation {
    condition     = can(regex("^[A-Z]{3}$", var.price_currency))
    error_message = "price_currency is an ISO 4217 code such as USD or EUR."
  }
}

variable "node_hour_prices" {
  description = "Price of one GPU node per hour by where it came from (keys: reservation, flex-start, spot, on-demand), for the cost of runs whose nodes are known; a kind not listed costs node_hour_price."
  type        = map(number)
  default     = {}
  validation {
    condition     = alltrue([for kind in keys(var.node_hour_prices) : contains(["reservation", "flex-start", "spot", "on-demand"], kind)])
    error_message = "node_hour_prices keys are reservation, flex-start, spot and on-demand."
  }
}

variable "network" {
  description = "VPC network of the GKE cluster (Cloud NAT is created on it)."
  type        = string
  default     = "default"
}

variable "create_nat" {
  description = "Create Cloud NAT for the private nodes' egress (PyPI, Hugging Face Hub, Docker Hub). false: no-egress mode (see network.tf)."
  type        = bool
  default     = true
}

variable "dataset_buckets" {
  description = "Buckets holding datasets (parquet shards) that run configs name as gs:// dataset ids: the trainer reads them, the functions list them for the nightly's fingerprint."
  type        = list(string)
  default     = []
}

variable "operators" {
  description = "IAM members (user:..., group:...) who run the raytune CLI: submit, runs, status, logs, cancel, image. They get exactly what functions/core/permissions.py lists for the operator."
  type        = list(string)
  default     = []
}

variable "retry_backoff_seconds" {
  description = "How long a run that lost its nodes (or, a nightly, failed for a cause that may pass) waits before its next attempt; doubled for each attempt after, at most 15 minutes."
  type        = number
  default     = 60
}

variable "staged_model_days" {
  description = "Days a model snapshot staged in the runs bucket (checkpoints/_models/) is kept before it is deleted and, if still used, downloaded from the Hub and staged again; 0 keeps them."
  type        = number
  default     = 30
  validation {
    condition     = var.staged_model_days >= 0
    error_message = "staged_model_days is a number of days, 0 or more."
  }
}

variable "sweep_grace_seconds" {
  description = "The leak sweep leaves RayJobs and RayClusters of this deployment that no run record accounts for alone this long after their creation."
  type        = number
  default     = 600
}

variable "gke_min_version" {
  description = "The oldest GKE the cluster may run: the one with everything raytune renders (functions/core/computeclass.py MIN_GKE_VERSION)."
  type        = string
  default     = "1.32.2-gke.1652000"
}

variable "policy_reservation_projects" {
  description = "Projects besides this one whose (shared) reservations a run config's scaling.capacity may name."
  type        = list(string)
  default     = []
}

variable "policy_image_cache_projects" {
  description = "Projects besides this one whose disk images a run config's cluster.image_cache may name (the launch allows the image in the GKE cluster)."
  type        = list(string)
  default     = []
}
