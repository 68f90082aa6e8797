"""The operator's policy: what a run config or message may touch, set in the functions' settings (Terraform
variables), enforced when a run is received, so a breach is one REJECTED record naming the rule.

Whoever can upload to the configs bucket or publish to the launch topic can launch runs; this bounds
what those runs can reach: namespaces, RayCluster names, images, extra pip packages, the GPU
reservation and node selectors, the buckets the controller reads and writes for them, the nightly
slot, and who can cancel.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from functions.core import capacity, image_cache, images, tracking
from functions.core.capacity import CapacityKind
from functions.core.config import (
    ACCELERATOR_LABEL,
    CAPACITY_LABELS,
    GKE_ACCELERATORS,
    TRAINER_PIP,
    Accelerator,
    CapacityOption,
    ClusterSpec,
    RunConfig,
    reservation_selector,
)
from functions.core.regions import DEFAULT_REGION_SECONDS
from functions.core.tracking import TrackingSpec

NIGHTLY_KEY_ATTRIBUTE = "raytune-nightly-key"
OPERATOR_KEY_ATTRIBUTE = "raytune-operator-key"
# The submitter's proof for cancelling its own run: the launch message's attribute (or, for an upload, the config
# object's custom metadata) is the SHA-256 of a random token only the submitter holds; a cancel carries the token.
CANCEL_DIGEST_ATTRIBUTE = "raytune-cancel-digest"
DIGEST = re.compile(r"[0-9a-f]{64}")  # the only form accepted: fullmatch, lowercase hex, nothing around it


def cancel_digest(token: str) -> str:
    # surrogatepass: a token that is not valid Unicode (JSON allows lone surrogates) is simply not the right one
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def digest_problem(digest: Any) -> str | None:
    """Why a cancel digest sent with a launch is not one (None: it is, in its canonical form). A launch whose
    digest is malformed is refused, not launched without it: that would leave the run to anyone to cancel."""
    if digest is None or (isinstance(digest, str) and DIGEST.fullmatch(digest)):
        return None
    return f"{CANCEL_DIGEST_ATTRIBUTE}: not a SHA-256 digest as 64 lowercase hex characters"


@dataclass(frozen=True)
class Confined:
    """The bucket where the trainer's grants have IAM conditions (terraform/iam.tf): the prefixes it may read
    and write there, and those it may only read."""

    bucket: str
    writes: tuple[str, ...]  # e.g. ("checkpoints/",)
    reads: tuple[str, ...] = ()  # e.g. ("datasets/",)


class Policy(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespaces: tuple[str, ...] = ("default",)  # fnmatch patterns
    ray_cluster_prefix: str = ""
    images: tuple[str, ...] = ("rayproject/*",)  # functions/core/images.py patterns: matched on the parsed reference
    allow_pip: bool = False  # configs may list packages beyond the trainer's pinned set
    reservation: str | None = None  # fixed by the operator: configs cannot choose another
    accelerator: Accelerator | None = None
    node_selector: dict[str, str] | None = None
    # Where GPU nodes come from when a config does not say (scaling.capacity); None: scaling.reservation alone
    capacity: tuple[CapacityOption, ...] | None = None
    # The capacity kinds a config may list; None: any, or only the operator's reservation when it fixes one
    capacity_kinds: tuple[CapacityKind, ...] | None = None
    # The projects whose reservations a capacity list may name (a reservation shared from another project);
    # None: any (the local default). Terraform sets the deployment's project and policy_reservation_projects.
    reservation_projects: tuple[str, ...] | None = None
    # The projects whose disk images cluster.image_cache may name (the launch allows the image in the cluster);
    # None: any (the local default). Terraform sets the deployment's project and policy_image_cache_projects.
    image_cache_projects: tuple[str, ...] | None = None
    buckets: tuple[str, ...] = ()  # config_uri buckets; empty: the controller's own
    # storage_path (and a gs:// init_adapter) buckets: where the trainer may write; empty: the controller's own.
    storage_buckets: tuple[str, ...] = ()
    dataset_buckets: tuple[str, ...] | None = None  # gs:// dataset buckets the trainer may read; None: unchecked
    regions: tuple[str, ...] = ()  # a run's regions: where Cloud NAT gives private nodes egress; empty: any
    # The regions, in order, of a config that names none (neither cluster.region nor cluster.fallback_regions).
    default_regions: tuple[str, ...] = ()
    # How long a submitted run waits for capacity in one region before it moves on, unless its config says
    # (deadlines.region_seconds), and the most a config may say.
    region_seconds: int = DEFAULT_REGION_SECONDS
    region_seconds_ceiling: int = 4 * 3600
    gke_clusters: tuple[str, ...] = ()  # cluster.gke_cluster: the clusters runs (and the HF Secret) may go; empty: any
    # GPU worker nodes one RayCluster may hold at once: a config's cluster.max_worker_nodes may ask for less.
    max_worker_nodes: int = 64
    local_storage: bool = False  # storage_path may be a local path (one machine; never in the cloud)
    # Tracking (functions/core/tracking.py): the section a config without one gets, and whose MLflow server a
    # config naming none uses; the destinations a config may name (None: any); the MLflow servers it may send to
    # (fnmatch patterns; None: any), as the tracking credentials go wherever it points.
    tracking: TrackingSpec | None = None
    tracking_destinations: tuple[str, ...] | None = None
    tracking_uris: tuple[str, ...] | None = None
    nightly_key: str | None = None  # nightly launches must carry it (the scheduler's attribute)
    operator_key: str | None = None  # cancels of other sources' runs must carry it

    @classmethod
    def unrestricted(cls) -> Policy:
        """The embedded local default's: one user on their own machine, nothing shared to protect."""
        return cls(
            namespaces=("*",), images=("*",), allow_pip=True, buckets=("*",), storage_buckets=("*",), local_storage=True
        )

    @property
    def fixed_selectors(self) -> dict[str, str]:
        """The worker node labels the operator fixes: its reservation, accelerator and node selectors."""
        fixed = dict(self.node_selector or {})
        if self.reservation is not None:
            fixed.update(reservation_selector(self.reservation))
        if self.accelerator is not None:
            fixed[ACCELERATOR_LABEL] = GKE_ACCELERATORS[self.accelerator]
        return fixed

    def violations(self, cfg: RunConfig, buckets: tuple[str, ...], confined: Confined | None = None) -> list[str]:
        """Every rule the config breaks, each naming the rule and what would satisfy it. `confined`: the one
        bucket (the controller's runs bucket) where the trainer may touch only some prefixes, and which."""
        found = []
        cluster = cfg.cluster
        if not any(fnmatch.fnmatchcase(cluster.namespace, pattern) for pattern in self.namespaces):
            found.append(
                f"policy namespaces: cluster.namespace {cluster.namespace!r} is not one of {list(self.namespaces)}"
            )
        if not cluster.ray_cluster.startswith(self.ray_cluster_prefix):
            found.append(
                f"policy ray_cluster_prefix: cluster.ray_cluster {cluster.ray_cluster!r} "
                f"does not start with {self.ray_cluster_prefix!r}"
            )
        for name, image in (
            ("cluster.head_image", cluster.head_image_ref),
            ("cluster.worker_image", cluster.worker_image_ref),
        ):
            if not any(images.allowed(image, pattern) for pattern in self.images):
                found.append(f"policy images: {name} {image!r} is not from an allowed registry {list(self.images)}")
        if cluster.image_cache and self.image_cache_projects is not None:
            project, _ = image_cache.parse(cluster.image_cache)
            if project not in self.image_cache_projects:
                found.append(
                    f"policy image_cache_projects: cluster.image_cache is a disk image of project {project!r}; "
                    f"disk images may come from {list(self.image_cache_projects)}"
                )
        extra = sorted(set(cluster.pip) - set(TRAINER_PIP))
        if cluster.dependencies == "pip" and extra and not self.allow_pip:
            found.append(
                f"policy allow_pip: cluster.pip adds {extra}; only the trainer's pinned packages may be installed"
            )
        found += self._capacity_violations(cfg)
        if self.gke_clusters and cluster.gke_cluster not in self.gke_clusters:
            found.append(
                f"policy gke_clusters: cluster.gke_cluster {cluster.gke_cluster!r} is not one of "
                f"{list(self.gke_clusters)}"
            )
        if cluster.max_worker_nodes > self.max_worker_nodes:
            found.append(
                f"policy max_worker_nodes: cluster.max_worker_nodes {cluster.max_worker_nodes} is more than the "
                f"{self.max_worker_nodes} GPU worker nodes the operator allows a RayCluster (a config may ask for less)"
            )
        outside = [r for r in cluster.regions if self.regions and r not in self.regions]
        if outside:
            found.append(
                f"policy regions: the run's regions (cluster.region, cluster.fallback_regions) name {outside}, not "
                f"among {list(self.regions)} (the regions with a cluster and Cloud NAT: Terraform's policy_regions)"
            )
        waits = cfg.deadlines.region_seconds
        if waits is not None and waits > self.region_seconds_ceiling:
            found.append(
                f"policy region_seconds: deadlines.region_seconds {waits} is more than the "
                f"{self.region_seconds_ceiling}s the operator lets a run wait in one region"
            )
        found += [f"policy capacity: {problem}" for problem in cfg.region_problems()]
        found += self._storage_violations(cfg, buckets, confined)
        return found + self._tracking_violations(cfg)

    def _tracking_violations(self, cfg: RunConfig) -> list[str]:
        """The destinations and servers the operator allows; in the cloud an MLflow run needs a server (the
        operator's default fills one in where it names one: fixed())."""
        found = tracking.problems(cfg.tracking, self.tracking_destinations, self.tracking_uris)
        if cfg.tracking is not None and cfg.tracking.mlflow_unplaced and not self.local_storage:
            found.append(
                "policy tracking: tracking.mlflow names no uri and the operator names no MLflow server "
                "(Terraform's policy_tracking): give tracking.mlflow.uri"
            )
        return found

    def _capacity_violations(self, cfg: RunConfig) -> list[str]:
        """The operator's reservation, accelerator and node selectors cannot be changed, neither through the
        scaling fields nor through scaling.node_selector (applied to the same labels)."""
        scaling = cfg.scaling
        found = []
        for knob, fixed, given in (
            ("reservation", self.reservation, scaling.reservation),
            (
                "accelerator",
                self.accelerator,
                scaling.accelerator if "accelerator" in scaling.model_fields_set else None,
            ),
        ):
            if fixed is not None and given is not None and given != fixed:
                found.append(f"policy {knob}: scaling.{knob} is fixed to {fixed!r} by the operator (got {given!r})")
        found += self._capacity_list_violations(cfg)
        found += self._selector_violations(cfg)
        return found

    @property
    def restricts_capacity(self) -> bool:
        """Whether the operator rules anything out about where GPU nodes come from: fixed labels, the kinds a
        config may ask for, a default capacity list, the projects reservations may come from."""
        restrictions = (self.capacity_kinds, self.capacity, self.reservation_projects)
        return bool(self.fixed_selectors) or any(r is not None for r in restrictions)

    def _selector_violations(self, cfg: RunConfig) -> list[str]:
        """scaling.node_selector can reach around whatever the operator restricts: Spot, another team's
        reservation, any compute class. With any restriction, a selector on a label that chooses capacity is
        REJECTED naming the rule, unless it says what is fixed (or the config's own accelerator) again."""
        if not self.restricts_capacity:
            return []
        scaling, fixed_labels = cfg.scaling, self.fixed_selectors
        own_accelerator = GKE_ACCELERATORS[scaling.accelerator] if scaling.use_gpu else None
        found = []
        for key, value in sorted(scaling.node_selector.items()):
            if key in fixed_labels:
                if value != fixed_labels[key]:
                    found.append(
                        f"policy node_selector: scaling.node_selector sets {key}={value!r}; the operator fixes it "
                        f"to {fixed_labels[key]!r}"
                    )
            elif key in CAPACITY_LABELS and not (key == ACCELERATOR_LABEL and value == own_accelerator):
                rule = "capacity_kinds" if self.capacity_kinds is not None else "node_selector"
                found.append(
                    f"policy {rule}: scaling.node_selector sets {key}, which chooses capacity; the operator decides "
                    f"where workers run (scaling.capacity may list {list(self.allowed_capacity)})"
                )
        return found

    @property
    def allowed_capacity(self) -> tuple[CapacityKind, ...]:
        """What configs may list: the operator's kinds, else with a fixed reservation only it and the kinds of the
        operator's own default list, else any."""
        if self.capacity_kinds is not None:
            return self.capacity_kinds
        if self.reservation:
            return tuple(dict.fromkeys(("reservation", *(o.kind for o in self.capacity or ()))))
        return tuple(kind.name for kind in capacity.KINDS.values())

    def _capacity_list_violations(self, cfg: RunConfig) -> list[str]:
        """A capacity list may use only the kinds the operator allows, and only its reservation when it fixes
        one (a config could otherwise leave a paid-for reservation for on-demand or another team's)."""
        found = []
        for option in cfg.scaling.capacity or ():
            if option.kind not in self.allowed_capacity:
                found.append(
                    f"policy capacity_kinds: scaling.capacity asks for {option.kind}; the operator allows "
                    f"{list(self.allowed_capacity)}"
                )
            elif option.kind == "reservation" and self.reservation and option.name != self.reservation:
                found.append(
                    f"policy reservation: scaling.capacity names reservation {option.name!r}; the operator's is "
                    f"{self.reservation!r}"
                )
            projects = self.reservation_projects
            if (
                option.kind == "reservation"
                and option.project
                and projects is not None
                and option.project not in projects
            ):
                found.append(
                    f"policy reservation_projects: scaling.capacity names a reservation of project "
                    f"{option.project!r}; reservations may come from {list(projects)}"
                )
        return found

    def _storage_violations(self, cfg: RunConfig, buckets: tuple[str, ...], confined: Confined | None) -> list[str]:
        """Every gs:// location the trainer touches must be a bucket its identity is granted (terraform/iam.tf):
        anything else fails at the trainer's first call with a 403, after the GPUs were paid for."""
        found = []
        storage = self.storage_buckets or buckets
        if cfg.storage_path and not cfg.storage_path.startswith("gs://") and not self.local_storage:
            found.append(
                f"policy storage: storage_path {cfg.storage_path!r} is a local path; in the cloud checkpoints must "
                "go to a gs:// bucket (the pods' disks and the functions' are not shared)"
            )
        for what, uri, allowed, rule, writes in (
            ("storage_path", cfg.storage_path, storage, "storage_buckets", True),
            (
                "training.init_adapter",
                cfg.training.init_adapter,
                (*storage, *(self.dataset_buckets or ())),
                "buckets",
                False,
            ),
            (
                "dataset.id",
                cfg.dataset.id,
                None if self.dataset_buckets is None else (*self.dataset_buckets, *storage),
                "dataset_buckets",
                False,
            ),
        ):
            if uri and allowed is not None and (why := _outside(uri, what, allowed, rule)):
                found.append(why)
            elif uri and confined and "*" not in storage and _bucket(uri) == confined.bucket:
                prefixes = confined.writes if writes else (*confined.writes, *confined.reads)
                if not any(f"{uri}/".startswith(f"gs://{confined.bucket}/{p}") for p in prefixes):
                    found.append(
                        f"policy storage: {what} {uri!r} is in the controller's bucket outside "
                        f"{[f'gs://{confined.bucket}/{p}' for p in prefixes]}: the trainer may "
                        f"{'write' if writes else 'read'} only there (the run records beside them are the functions')"
                    )
        return found

    def bucket_violation(self, uri: str, what: str, buckets: tuple[str, ...]) -> str | None:
        return _outside(uri, what, self.buckets or buckets, "buckets")

    def fixed(self, cfg: RunConfig) -> RunConfig:
        """The config with the operator's fixed reservation, accelerator and node selectors filled in where it sets
        none (its own further selectors kept beside them)."""
        scaling = cfg.scaling
        updates: dict[str, object] = {}
        # Filled in where the config says nothing; what it says itself stays, for violations() to judge: a config
        # asking for another reservation, accelerator or selector value is REJECTED, never silently overridden.
        if self.accelerator is not None and "accelerator" not in scaling.model_fields_set:
            updates["accelerator"] = self.accelerator
        if scaling.capacity is None and self.capacity and scaling.use_gpu and scaling.reservation is None:
            updates["capacity"] = list(self.capacity)  # the operator's default list, where the config gives none
        elif self.reservation is not None and scaling.capacity is None and scaling.reservation is None:
            updates["reservation"] = self.reservation
        if self.node_selector is not None:
            updates["node_selector"] = {**self.node_selector, **cfg.scaling.node_selector}
        where = self._default_regions(cfg)
        tracked = self._default_tracking(cfg)
        if not updates and where is None and tracked is None:
            return cfg
        # Copied, not validated: a config that clashes with the operator is reported by violations(), by rule.
        return cfg.model_copy(
            update={
                "scaling": scaling.model_copy(update=updates),
                **({"cluster": where} if where else {}),
                **({"tracking": tracked} if tracked else {}),
            }
        )

    def _default_tracking(self, cfg: RunConfig) -> TrackingSpec | None:
        """The operator's tracking section for a config without one, and its MLflow server for a config that
        tracks in MLflow without naming one (None: nothing to fill in)."""
        if self.tracking is None:
            return None
        if cfg.tracking is None:
            return self.tracking
        own, default = cfg.tracking.mlflow, self.tracking.mlflow
        if own is not None and cfg.tracking.mlflow_unplaced and default is not None and default.uri:
            return cfg.tracking.model_copy(update={"mlflow": own.model_copy(update={"uri": default.uri})})
        return None

    def _default_regions(self, cfg: RunConfig) -> ClusterSpec | None:
        """The operator's default region order, for a config that names no region."""
        cluster = cfg.cluster
        if not self.default_regions or {"region", "fallback_regions"} & cluster.model_fields_set:
            return None
        first, *rest = self.default_regions
        return cluster.model_copy(update={"region": first, "fallback_regions": rest})

    def nightly_violation(self, attributes: Mapping[str, str]) -> str | None:
        if self.nightly_key is None or _same(attributes.get(NIGHTLY_KEY_ATTRIBUTE), self.nightly_key):
            return None
        return (
            f"policy nightly_key: nightly runs are accepted only from the scheduler (attribute {NIGHTLY_KEY_ATTRIBUTE})"
        )

    def may_cancel(self, run_source: Mapping[str, str], token: str | None, attributes: Mapping[str, str]) -> bool:
        """Cancels come from an operator (the operator key attribute) or from the run's submitter: the token
        whose digest its launch carried. A run launched without a digest is the operators' to cancel; with no
        operator key set, anyone who may publish to the watch topic may cancel (the trainer pods can: set it).
        Anything readable in the bucket or a listing (the source ref, the run id) proves nothing."""
        if self.operator_key is not None and _same(attributes.get(OPERATOR_KEY_ATTRIBUTE), self.operator_key):
            return True
        digest = run_source.get("cancel_digest")
        if digest:
            return token is not None and _same(cancel_digest(token), digest)
        return self.operator_key is None


def _bucket(uri: str) -> str | None:
    return uri.removeprefix("gs://").split("/", 1)[0] if uri.startswith("gs://") else None


def _outside(uri: str, what: str, allowed: tuple[str, ...], rule: str) -> str | None:
    bucket = _bucket(uri)
    if not uri.startswith("gs://") or bucket in allowed or "*" in allowed:
        return None
    return f"policy {rule}: {what} names bucket {bucket!r}; allowed: {list(dict.fromkeys(allowed))}"


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
