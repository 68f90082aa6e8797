# The operator policy: what a run config or launch message may touch. Whoever may upload to the configs
# bucket or publish to the launch topic can launch runs; these bound what such runs reach (docs/security.md: Threat
# model). A breach is a REJECTED record naming the rule.

variable "policy_namespaces" {
  description = "Kubernetes namespaces runs may use (cluster.namespace). The HF token Secret is copied into each."
  type        = list(string)
  default     = ["default"]
}

variable "policy_ray_cluster_prefix" {
  description = "RayCluster names runs may use must start with this (empty: any name; RayClusters not labelled managed-by=raytune are never changed)."
  type        = string
  default     = ""
}

variable "policy_images" {
  description = "Patterns of the head/worker images runs may use, matched on the parsed reference (registry domain, then path; functions/core/images.py); empty: rayproject/* and this project's Artifact Registry (*-docker.pkg.dev/<project>/*)."
  type        = list(string)
  default     = []
}

variable "policy_allow_pip" {
  description = "Whether configs may list pip packages beyond the trainer's pinned set (pods that install them receive HF_TOKEN)."
  type        = bool
  default     = false
}

variable "policy_accelerator" {
  description = "GPU type every run uses (B200, H200, ...); empty: the config chooses. The reservation is fixed by var.reservation."
  type        = string
  default     = ""
}

variable "policy_node_selector" {
  description = "Node selectors every worker gets; a config cannot set others."
  type        = map(string)
  default     = {}
}

variable "policy_capacity" {
  description = "Where GPU nodes come from for configs that do not say (scaling.capacity), in order: reservation (name, optional project and block), flex-start (optional max_run_seconds), spot, on-demand. Rendered as a GKE ComputeClass. Empty: var.reservation alone, as the reference tutorial (no ComputeClass)."
  type = list(object({
    kind            = string
    name            = optional(string)
    project         = optional(string)
    block           = optional(string)
    max_run_seconds = optional(number)
  }))
  default = []
  validation {
    condition     = alltrue([for option in var.policy_capacity : contains(["reservation", "flex-start", "spot", "on-demand"], option.kind)])
    error_message = "policy_capacity kinds are reservation, flex-start, spot and on-demand."
  }
}

variable "policy_capacity_kinds" {
  description = "The capacity kinds a config's scaling.capacity may list. Empty: any, or only var.reservation when it is set (a config cannot leave the reservation for on-demand or Spot unless listed here)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for kind in var.policy_capacity_kinds : contains(["reservation", "flex-start", "spot", "on-demand"], kind)])
    error_message = "policy_capacity_kinds are reservation, flex-start, spot and on-demand."
  }
}

variable "policy_regions" {
  description = "Regions besides var.region where runs may go (cluster.region, cluster.fallback_regions): a GKE cluster of gke_cluster_name (with create_gke_cluster) and Cloud NAT are created in each. Append, never reorder (the clusters are indexed by this order). A config naming another region is rejected."
  type        = list(string)
  default     = []
}

variable "policy_default_regions" {
  description = "The regions, in order, of a config that names none (neither cluster.region nor cluster.fallback_regions): it starts in the first and moves on when it waits for capacity. Each must be var.region or among policy_regions (a config placed elsewhere is rejected naming the rule). Empty: such a config stays in cluster.region's default."
  type        = list(string)
  default     = []
}

variable "policy_region_seconds" {
  description = "How long a submitted run waits for GPU capacity in one region before it moves to the next of its regions, unless its config sets deadlines.region_seconds."
  type        = number
  default     = 1800
}

variable "policy_region_seconds_ceiling" {
  description = "The longest deadlines.region_seconds a config may set (at least policy_region_seconds)."
  type        = number
  default     = 14400
}

variable "policy_gke_clusters" {
  description = "GKE clusters besides var.gke_cluster_name that cluster.gke_cluster may name (runs and the HF token Secret go into them); a config naming another is rejected."
  type        = list(string)
  default     = []
}

variable "policy_max_worker_nodes" {
  description = "GPU worker nodes one RayCluster may hold at once, whatever its runs ask; a config's cluster.max_worker_nodes may be lower, never higher."
  type        = number
  default     = 5
  validation {
    condition     = var.policy_max_worker_nodes >= 1 && var.policy_max_worker_nodes <= 64
    error_message = "policy_max_worker_nodes must be between 1 and 64."
  }
}

variable "policy_buckets" {
  description = "Buckets besides the runs and configs buckets that config_uri and storage_path may name: the functions may read them, the trainer may write checkpoints there (terraform/iam.tf)."
  type        = list(string)
  default     = []
}

# The nightly scheduler job carries this key; launch messages claiming the nightly slot without it are rejected.
resource "random_password" "nightly_key" {
  length  = 40
  special = false
}

# Cancels of another source's run must carry this key (attribute raytune-operator-key): give it to operators.
resource "random_password" "operator_key" {
  length  = 40
  special = false
}

# Experiment tracking (docs/tracking.md): the section a config without one gets, the destinations a config may
# name, and the MLflow servers a run may send to (a run's tracking credentials go where its URI points).
variable "policy_tracking" {
  description = "The tracking section a run config without one gets (e.g. { mlflow = { uri = \"https://mlflow.example.com\" } }); its MLflow uri is also the server of a config that tracks in MLflow and names none. null: none."
  type        = any
  default     = null
}

variable "policy_tracking_destinations" {
  description = "The tracking destinations a config may name (mlflow, wandb, vertex); empty: any."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for d in var.policy_tracking_destinations : contains(["mlflow", "wandb", "vertex"], d)])
    error_message = "policy_tracking_destinations: each must be mlflow, wandb or vertex."
  }
}

variable "policy_tracking_uris" {
  description = "The MLflow tracking servers a config's tracking.mlflow.uri may name (fnmatch patterns); empty: any. Set it whenever tracking credentials are given: they go to whatever server a config names."
  type        = list(string)
  default     = []
}

variable "tracking_credentials" {
  description = "The tracking credentials the deployment holds, by their variables' names (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD, WANDB_API_KEY): a Secret Manager secret is made for each (raytune-<name>), its value added out of band, as the HF token's."
  type        = list(string)
  default     = []
  validation {
    condition = alltrue([for name in var.tracking_credentials : contains(
    ["MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "WANDB_API_KEY"], name)])
    error_message = "tracking_credentials: each must be one of MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD, WANDB_API_KEY."
  }
}
