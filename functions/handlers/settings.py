"""Controller settings, read once from the environment (Terraform sets them on each function)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from functions.adapters.store import LOGS, QUARANTINE_ROOT, RECORDS
from functions.core import tracking
from functions.core.allocation import ALLOCATIONS
from functions.core.champion import CHAMPIONS_PREFIX
from functions.core.config import RunConfig
from functions.core.decide import RETRY_BACKOFF_SECONDS
from functions.core.estimate import price_list
from functions.core.fingerprint import NIGHTLY_PREFIX
from functions.core.policy import Confined, Policy

RUNS_BUCKET_DATASETS = "datasets/"  # where datasets staged in the runs bucket go: the trainer reads them


@dataclass(frozen=True)
class Settings:
    project: str
    bucket: str  # run records (runs/) and default checkpoints (checkpoints/)
    watch_topic: str | None  # full topic path; the trainer's completion notice goes here
    events_topic: str | None  # full topic path; run-finished events for other systems
    max_event_age_s: int  # older deliveries are recorded as rejected, not launched
    hf_token: str | None  # bound from Secret Manager; never logged or stored
    checkpoints: str | None = None  # where runs without a storage_path keep checkpoints
    node_hour_price: float | None = None  # a GPU node's price per hour, for each run's cost
    # per capacity kind (reservation, flex-start, spot, on-demand): what a node of that kind costs an hour
    node_hour_prices: dict[str, float] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)
    create_clusters: bool = False  # the functions may create GKE clusters and enable the Ray operator
    network: str = "default"  # the VPC network of clusters the functions create
    sweep_grace_s: int = 600  # the leak sweep leaves RayJobs and RayClusters younger than this alone
    retry_backoff_s: int = RETRY_BACKOFF_SECONDS[0]  # before a run's second attempt (doubling after)
    # The tracking destinations' credentials (MLFLOW_TRACKING_TOKEN, WANDB_API_KEY, ...), bound from Secret Manager
    # as the HF token is: into the pods' Secret, and the champion alias's registry client; never logged or stored.
    tracking_credentials: dict[str, str] = field(default_factory=dict)

    @property
    def default_storage(self) -> str:
        return self.checkpoints or f"gs://{self.bucket}/checkpoints"

    @property
    def own_buckets(self) -> tuple[str, ...]:
        """The buckets runs may name when the policy lists none: the controller's and its checkpoints'."""
        checkpoints = self.default_storage.removeprefix("gs://").split("/", 1)[0]
        return tuple(dict.fromkeys([self.bucket, checkpoints]))

    @property
    def prices(self) -> dict[str, float]:
        """A node-hour's price by capacity kind (estimates before launch)."""
        return price_list(self.node_hour_prices, self.node_hour_price)

    def node_hour_price_of(self, nodes: dict[str, str]) -> float | None:
        """A node-hour's price for nodes of these capacities (their mean), by the price of each one's kind, else
        the one price; None where one has neither."""
        if not nodes:
            return self.node_hour_price
        prices = [self.node_hour_prices.get(kind.split(" ", 1)[0], self.node_hour_price) for kind in nodes.values()]
        if any(price is None for price in prices):
            return None
        return sum(p for p in prices if p is not None) / len(prices)

    def config_uri_violation(self, uri: str) -> str | None:
        """A config_uri into what the controller and the trainer keep in the runs bucket (run records, allocations,
        champions, nightly pointers, kept logs, quarantined objects, runs' checkpoints and results) is refused
        before it is read: their content would be copied into a REJECTED record anyone may read."""
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        if not uri.startswith("gs://") or bucket != self.bucket:
            return None
        checkpoints = self.default_storage.removeprefix(f"gs://{bucket}/").rstrip("/") + "/"
        owned = (RECORDS, QUARANTINE_ROOT, ALLOCATIONS, CHAMPIONS_PREFIX, NIGHTLY_PREFIX, LOGS, checkpoints)
        if hit := next((prefix for prefix in owned if name.startswith(prefix)), None):
            return (
                f"config_uri {uri} is under {hit} of the runs bucket, which the controller and its runs keep: "
                "never read as a config"
            )
        return None

    def violations(self, cfg: RunConfig) -> list[str]:
        """The operator policy's verdict on a run's config in this deployment: its own buckets, and in the runs
        bucket only what the trainer's conditional grants there reach (terraform/iam.tf): the checkpoints prefix
        (read and write) and datasets/ (read)."""
        bucket, _, prefix = self.default_storage.removeprefix("gs://").partition("/")
        confined = None
        if bucket == self.bucket:
            confined = Confined(bucket, writes=(prefix.rstrip("/") + "/",), reads=(RUNS_BUCKET_DATASETS,))
        return self.policy.violations(cfg, self.own_buckets, confined)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        missing = [name for name in ("RAYTUNE_PROJECT", "RAYTUNE_BUCKET") if not env.get(name)]
        if missing:
            raise RuntimeError(f"missing environment: {', '.join(missing)}")
        return cls(
            project=env["RAYTUNE_PROJECT"],
            bucket=env["RAYTUNE_BUCKET"],
            watch_topic=env.get("RAYTUNE_WATCH_TOPIC") or None,
            events_topic=env.get("RAYTUNE_EVENTS_TOPIC") or None,
            max_event_age_s=int(env.get("RAYTUNE_MAX_EVENT_AGE_S", 12 * 3600)),
            hf_token=env.get("HF_TOKEN") or None,
            checkpoints=env.get("RAYTUNE_CHECKPOINTS") or None,
            node_hour_price=float(env["RAYTUNE_NODE_HOUR_PRICE"]) if env.get("RAYTUNE_NODE_HOUR_PRICE") else None,
            node_hour_prices={
                kind: float(price) for kind, price in json.loads(env.get("RAYTUNE_NODE_HOUR_PRICES") or "{}").items()
            },
            policy=policy_from_env(env),
            create_clusters=env.get("RAYTUNE_CREATE_CLUSTERS", "").lower() == "true",
            network=env.get("RAYTUNE_NETWORK") or "default",
            sweep_grace_s=int(env.get("RAYTUNE_SWEEP_GRACE_S") or 600),
            retry_backoff_s=int(env.get("RAYTUNE_RETRY_BACKOFF_S") or RETRY_BACKOFF_SECONDS[0]),
            tracking_credentials={name: env[name] for name in tracking.CREDENTIALS if env.get(name)},
        )


def _list(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


def policy_from_env(env: Mapping[str, str]) -> Policy:
    """RAYTUNE_POLICY_* variables (Terraform's `policy_*` variables); unset ones keep the defaults. Images
    default to rayproject/ and this project's Artifact Registry."""
    project = env.get("RAYTUNE_PROJECT", "")
    given = {
        "namespaces": _list(env.get("RAYTUNE_POLICY_NAMESPACES")),
        "ray_cluster_prefix": env.get("RAYTUNE_POLICY_RAY_CLUSTER_PREFIX"),
        "images": _list(env.get("RAYTUNE_POLICY_IMAGES")) or (*Policy().images, f"*-docker.pkg.dev/{project}/*"),
        "allow_pip": env.get("RAYTUNE_POLICY_ALLOW_PIP", "").lower() in ("1", "true", "yes") or None,
        "reservation": env.get("RAYTUNE_POLICY_RESERVATION") or None,
        "accelerator": env.get("RAYTUNE_POLICY_ACCELERATOR") or None,
        "node_selector": json.loads(env["RAYTUNE_POLICY_NODE_SELECTOR"])
        if env.get("RAYTUNE_POLICY_NODE_SELECTOR")
        else None,
        "buckets": _list(env.get("RAYTUNE_POLICY_BUCKETS")),
        "storage_buckets": _list(env.get("RAYTUNE_POLICY_STORAGE_BUCKETS")),
        "dataset_buckets": _list(env.get("RAYTUNE_POLICY_DATASET_BUCKETS")),
        "regions": _list(env.get("RAYTUNE_POLICY_REGIONS")),
        "default_regions": _list(env.get("RAYTUNE_POLICY_DEFAULT_REGIONS")),
        "region_seconds": env.get("RAYTUNE_POLICY_REGION_SECONDS") or None,
        "region_seconds_ceiling": env.get("RAYTUNE_POLICY_REGION_SECONDS_CEILING") or None,
        "gke_clusters": _list(env.get("RAYTUNE_POLICY_GKE_CLUSTERS")),
        "capacity": json.loads(env["RAYTUNE_POLICY_CAPACITY"]) if env.get("RAYTUNE_POLICY_CAPACITY") else None,
        "capacity_kinds": _list(env.get("RAYTUNE_POLICY_CAPACITY_KINDS")),
        # Reservations a capacity list names come from the deployment's project unless the operator lists others.
        "reservation_projects": _list(env.get("RAYTUNE_POLICY_RESERVATION_PROJECTS"))
        or ((project,) if project else None),
        # Disk images an image cache names come from the deployment's project unless the operator lists others.
        "image_cache_projects": _list(env.get("RAYTUNE_POLICY_IMAGE_CACHE_PROJECTS"))
        or ((project,) if project else None),
        "max_worker_nodes": env.get("RAYTUNE_POLICY_MAX_WORKER_NODES") or None,
        "tracking": json.loads(env["RAYTUNE_POLICY_TRACKING"]) if env.get("RAYTUNE_POLICY_TRACKING") else None,
        "tracking_destinations": _list(env.get("RAYTUNE_POLICY_TRACKING_DESTINATIONS")),
        "tracking_uris": _list(env.get("RAYTUNE_POLICY_TRACKING_URIS")),
        "nightly_key": env.get("RAYTUNE_NIGHTLY_KEY") or None,
        "operator_key": env.get("RAYTUNE_OPERATOR_KEY") or None,
    }
    return Policy.model_validate({k: v for k, v in given.items() if v is not None})
