"""The operator policy, pure: each knob's rule and its message, the fixed selectors, the nightly key and
who may cancel."""

from __future__ import annotations

import pytest

from functions.core.config import CapacityOption, RunConfig
from functions.core.policy import NIGHTLY_KEY_ATTRIBUTE, OPERATOR_KEY_ATTRIBUTE, Policy, cancel_digest
from functions.handlers.settings import policy_from_env

pytestmark = pytest.mark.unit
OWN = ("runs-bucket", "configs-bucket")


def cfg(**sections) -> RunConfig:
    return RunConfig.model_validate({"storage_path": "gs://runs-bucket/checkpoints", **sections})


@pytest.mark.parametrize(
    ("config", "rule"),
    [
        (cfg(cluster={"namespace": "kube-system"}), "policy namespaces: cluster.namespace 'kube-system'"),
        (
            cfg(cluster={"worker_image": "evil.io/miner:latest"}),
            "policy images: cluster.worker_image 'evil.io/miner:latest'",
        ),
        (cfg(cluster={"pip": ["cryptominer==1.0"]}), "policy allow_pip: cluster.pip adds ['cryptominer==1.0']"),
        (cfg(storage_path="gs://someone-else/x"), "policy storage_buckets: storage_path names bucket 'someone-else'"),
        (cfg(storage_path="/mnt/checkpoints"), "policy storage: storage_path '/mnt/checkpoints' is a local path"),
    ],
)
def test_the_default_policy_names_the_rule_a_config_breaks(config, rule):
    found = Policy().violations(config, OWN)
    assert any(rule in v for v in found), found


def test_the_defaults_accept_the_default_config_and_the_projects_registry():
    policy = policy_from_env({"RAYTUNE_PROJECT": "proj"})
    assert policy.violations(cfg(), OWN) == []
    assert (
        policy.violations(cfg(cluster={"worker_image": "us-central1-docker.pkg.dev/proj/raytune/trainer:1"}), OWN) == []
    )
    assert policy.violations(cfg(cluster={"worker_image": "us-central1-docker.pkg.dev/other/x/y:1"}), OWN)


def test_operator_fixed_selectors_win_and_a_config_cannot_choose_others():
    policy = Policy(reservation="a4-res", accelerator="H200", node_selector={"pool": "gpu"})
    fixed = policy.fixed(cfg(scaling={"node_selector": {"team": "a"}}))
    assert (fixed.scaling.reservation, fixed.scaling.accelerator, fixed.scaling.node_selector) == (
        "a4-res",
        "H200",
        {"team": "a", "pool": "gpu"},  # the config's own further selectors stay beside the operator's
    )
    breaking = cfg(scaling={"reservation": "other", "accelerator": "B200", "node_selector": {"pool": "cpu"}})
    rules = {v.split(":")[0] for v in policy.violations(breaking, OWN)}
    assert rules == {"policy reservation", "policy accelerator", "policy node_selector"}


@pytest.mark.parametrize(
    "selector",
    [
        {"cloud.google.com/reservation-name": "someone-elses"},
        {"cloud.google.com/reservation-affinity": "any"},
        {"cloud.google.com/gke-accelerator-count": "4"},
        {"cloud.google.com/gke-spot": "true"},
        {"cloud.google.com/compute-class": "Performance"},
    ],
)
def test_node_selector_cannot_change_what_the_operator_fixes(selector):
    """The issue's escape: a config's node_selector was applied after the operator's reservation and
    accelerator, and checked only when the operator also set node selectors. Now each is a REJECTED rule, and
    the manifest lets scaling's fields win even so."""
    from functions.core.manifests import worker_group

    policy = Policy(reservation="a4-res", accelerator="B200")
    config = cfg(scaling={"node_selector": selector})
    [found] = policy.violations(policy.fixed(config), OWN)
    assert found.startswith(f"policy node_selector: scaling.node_selector sets {next(iter(selector))}")
    workers = worker_group(policy.fixed(config), "run-1", 1, [], "h")["template"]["spec"]
    assert workers["nodeSelector"]["cloud.google.com/reservation-name"] == "a4-res"
    assert workers["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-b200"


def test_a_node_selector_that_contradicts_the_configs_own_fields_is_a_config_error():
    with pytest.raises(ValueError, match=r"cloud\.google\.com/gke-accelerator, which scaling\.accelerator"):
        cfg(scaling={"accelerator": "B200", "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}})
    # saying the same thing twice is fine
    cfg(scaling={"accelerator": "L4", "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}})


def test_clusters_and_the_node_cap_are_the_operators():
    policy = Policy(gke_clusters=("raytune",), max_worker_nodes=5)
    assert policy.violations(cfg(), OWN) == []
    [found] = policy.violations(cfg(cluster={"gke_cluster": "prod-serving"}), OWN)
    assert found == "policy gke_clusters: cluster.gke_cluster 'prod-serving' is not one of ['raytune']"
    [found] = policy.violations(cfg(cluster={"max_worker_nodes": 64}), OWN)
    assert found.startswith("policy max_worker_nodes: cluster.max_worker_nodes 64 is more than the 5")
    assert policy.violations(cfg(cluster={"max_worker_nodes": 3}, scaling={"nodes": 1}), OWN) == []  # less is fine


def test_prefix_and_extra_buckets():
    policy = Policy(ray_cluster_prefix="team-a-", buckets=("shared",))
    assert any("ray_cluster_prefix" in v for v in policy.violations(cfg(), OWN))
    assert policy.bucket_violation("gs://shared/x", "config_uri", OWN) is None
    assert "policy buckets" in (policy.bucket_violation("gs://runs-bucket/x", "config_uri", OWN) or "")


def test_nightly_needs_the_schedulers_key_and_cancel_the_source_or_an_operator():
    policy = Policy(nightly_key="k" * 40, operator_key="o" * 40)
    assert policy.nightly_violation({}) and policy.nightly_violation({NIGHTLY_KEY_ATTRIBUTE: "wrong"})
    assert policy.nightly_violation({NIGHTLY_KEY_ATTRIBUTE: "k" * 40}) is None
    token = "t" * 43
    source = {"kind": "message", "ref": "pubsub:42", "cancel_digest": cancel_digest(token)}
    assert not policy.may_cancel(source, None, {})
    assert not policy.may_cancel(source, "pubsub:42", {})  # what anyone reading the record knows proves nothing
    assert not policy.may_cancel(source, cancel_digest(token), {})  # nor does the digest itself
    assert policy.may_cancel(source, token, {})
    assert policy.may_cancel(source, None, {OPERATOR_KEY_ATTRIBUTE: "o" * 40})
    assert not policy.may_cancel({"kind": "upload", "ref": "gs://c/configs/x.json#1"}, "gs://c/configs/x.json#1", {})
    assert Policy().may_cancel(
        {"kind": "message", "ref": "pubsub:42"}, None, {}
    )  # no operator key: whoever may publish
    assert not Policy().may_cancel(source, "wrong", {})  # a run with a digest needs its token all the same


def test_the_local_default_is_unrestricted():
    hostile = cfg(
        cluster={"namespace": "team-b", "worker_image": "us-docker.pkg.dev/p/r/trainer:1", "pip": ["extra==1"]}
    )
    assert Policy.unrestricted().violations(hostile.model_copy(update={"storage_path": "gs://anywhere/x"}), OWN) == []


def test_every_bucket_the_trainer_touches_is_one_it_is_granted():
    """Terraform grants the trainer storage_buckets (write) and dataset_buckets (read); anything else would be a
    403 at the trainer's first call, so it is a REJECTED record instead (tests/contract/test_iam_grants.py holds
    the env Terraform sets is what it grants)."""
    policy = Policy(storage_buckets=("runs-bucket", "shared"), dataset_buckets=("runs-bucket", "shared", "data"))
    assert policy.violations(cfg(storage_path="gs://shared/ckpt", dataset={"id": "gs://data/shards/"}), OWN) == []
    rules = [v.split(":")[0] for v in policy.violations(cfg(storage_path="gs://configs-bucket/x"), OWN)]
    assert rules == ["policy storage_buckets"]  # the configs bucket is readable, not writable: uploads launch runs
    found = policy.violations(cfg(dataset={"id": "gs://elsewhere/shards/"}), OWN)
    assert found == [
        "policy dataset_buckets: dataset.id names bucket 'elsewhere'; allowed: ['runs-bucket', 'shared', 'data']"
    ]
    found = policy.violations(cfg(training={"init_adapter": "gs://elsewhere/adapter"}), OWN)
    assert [v.split(":")[0] for v in found] == ["policy buckets"]
    # Hub datasets and the built-in one are not buckets.
    assert policy.violations(cfg(dataset={"id": "philschmid/amazon-product-descriptions-vlm"}), OWN) == []


def test_regions_are_those_with_egress():
    policy = Policy(regions=("us-central1", "europe-west4"))
    assert policy.violations(cfg(cluster={"region": "europe-west4"}), OWN) == []
    [found] = policy.violations(cfg(cluster={"region": "asia-southeast1"}), OWN)
    assert found.startswith(
        "policy regions: the run's regions (cluster.region, cluster.fallback_regions) name ['asia-southeast1'], "
        "not among ['us-central1', 'europe-west4']"
    )
    assert Policy().violations(cfg(cluster={"region": "asia-southeast1"}), OWN) == []  # unset: any
    moving = cfg(cluster={"region": "us-central1", "fallback_regions": ["europe-west4", "asia-southeast1"]})
    [found] = policy.violations(moving, OWN)
    assert "name ['asia-southeast1']" in found


def test_the_operator_bounds_the_wait_in_one_region_and_orders_regions_for_configs_naming_none():
    policy = Policy(region_seconds=900, region_seconds_ceiling=3600, default_regions=("europe-west4", "us-east5"))
    [found] = policy.violations(cfg(deadlines={"region_seconds": 7200}), OWN)
    assert found == (
        "policy region_seconds: deadlines.region_seconds 7200 is more than the 3600s the operator lets a run wait "
        "in one region"
    )
    assert policy.violations(cfg(deadlines={"region_seconds": 3600}), OWN) == []
    placed = policy.fixed(cfg())
    assert placed.cluster.regions == ("europe-west4", "us-east5")
    assert policy.fixed(cfg(cluster={"region": "us-central1"})).cluster.regions == ("us-central1",)  # its own


def test_the_operators_default_capacity_list_must_serve_every_region_of_the_run():
    """A default list whose options are all pinned to one region leaves the run's other region with an empty
    ComputeClass: REJECTED naming the rule, never applied."""
    policy = Policy(capacity=(CapacityOption(kind="spot", region="us-central1"),))
    gpu = cfg(scaling={"gpus_per_node": 8}, cluster={"region": "us-central1", "fallback_regions": ["europe-west4"]})
    [found] = policy.violations(policy.fixed(gpu), OWN)
    assert found == (
        "policy capacity: scaling.capacity offers no option in europe-west4: give one there, or drop the region"
    )


def test_the_environment_terraform_sets_reaches_the_policy():
    policy = policy_from_env(
        {
            "RAYTUNE_PROJECT": "proj",
            "RAYTUNE_POLICY_STORAGE_BUCKETS": "runs-bucket,shared",
            "RAYTUNE_POLICY_DATASET_BUCKETS": "runs-bucket,shared,data",
            "RAYTUNE_POLICY_REGIONS": "us-central1,europe-west4",
            "RAYTUNE_POLICY_GKE_CLUSTERS": "raytune,shared",
            "RAYTUNE_POLICY_MAX_WORKER_NODES": "5",
        }
    )
    assert policy.gke_clusters == ("raytune", "shared")
    assert policy.max_worker_nodes == 5
    assert policy.storage_buckets == ("runs-bucket", "shared")
    assert policy.dataset_buckets == ("runs-bucket", "shared", "data")
    assert policy.regions == ("us-central1", "europe-west4")


def test_in_the_runs_bucket_the_trainer_may_touch_only_the_checkpoints_prefix():
    """terraform/iam.tf grants the trainer objects under checkpoints/ of the runs bucket only (an IAM condition), so
    the records beside them cannot be rewritten by a pod; a config pointing elsewhere there is REJECTED."""
    from functions.handlers.settings import Settings

    settings = Settings(
        project="p", bucket="runs-bucket", watch_topic=None, events_topic=None, max_event_age_s=60, hf_token=None
    )
    assert settings.violations(cfg()) == []
    assert settings.violations(cfg(storage_path="gs://runs-bucket/checkpoints/team-a")) == []
    assert settings.violations(cfg(dataset={"id": "gs://runs-bucket/datasets/products/"})) == []  # read only
    for config in (
        cfg(storage_path="gs://runs-bucket/runs"),
        cfg(storage_path="gs://runs-bucket/checkpointsX"),
        cfg(storage_path="gs://runs-bucket/datasets/x"),  # readable, not writable
    ):
        [found] = settings.violations(config)
        assert (
            found.startswith("policy storage: storage_path ") and "outside ['gs://runs-bucket/checkpoints/']" in found
        )
    for config in (
        cfg(training={"init_adapter": "gs://runs-bucket/champions/x"}),
        cfg(dataset={"id": "gs://runs-bucket/runs/"}),
    ):
        [found] = settings.violations(config)
        assert "outside ['gs://runs-bucket/checkpoints/', 'gs://runs-bucket/datasets/']: the trainer may read" in found


@pytest.mark.parametrize(
    "selector",
    [
        {"cloud.google.com/gke-spot": "true"},
        {"cloud.google.com/reservation-name": "team-b-res", "cloud.google.com/reservation-affinity": "specific"},
        {"cloud.google.com/compute-class": "Performance"},
    ],
)
def test_a_node_selector_cannot_reach_around_the_capacity_kinds_the_operator_allows(selector):
    """Issue 39: the kinds were enforced on scaling.capacity only; without a fixed reservation, a node selector
    took Spot, another team's reservation or any compute class."""
    policy = Policy(capacity_kinds=("reservation", "on-demand"))
    found = policy.violations(policy.fixed(cfg(scaling={"node_selector": selector})), OWN)
    assert found and all(
        f.startswith("policy capacity_kinds: scaling.node_selector sets cloud.google.com/") for f in found
    )
    assert len(found) == len(selector)
    # A label that chooses nothing, or the config's own accelerator said again, is fine.
    fine = cfg(scaling={"node_selector": {"team": "a", "cloud.google.com/gke-accelerator": "nvidia-b200"}})
    assert policy.violations(policy.fixed(fine), OWN) == []
    # The local default restricts nothing.
    assert Policy.unrestricted().violations(cfg(scaling={"node_selector": selector}), OWN) == []


def test_a_reservation_comes_from_the_operators_projects():
    policy = Policy(reservation="a4-res", reservation_projects=("my-project",))
    option = {"kind": "reservation", "name": "a4-res"}
    assert policy.violations(cfg(scaling={"capacity": [option]}), OWN) == []
    assert policy.violations(cfg(scaling={"capacity": [{**option, "project": "my-project"}]}), OWN) == []
    [found] = policy.violations(cfg(scaling={"capacity": [{**option, "project": "other-team"}]}), OWN)
    assert found == (
        "policy reservation_projects: scaling.capacity names a reservation of project 'other-team'; "
        "reservations may come from ['my-project']"
    )
    assert policy_from_env({"RAYTUNE_PROJECT": "my-project"}).reservation_projects == ("my-project",)
    shared = policy_from_env(
        {"RAYTUNE_PROJECT": "my-project", "RAYTUNE_POLICY_RESERVATION_PROJECTS": "my-project,shared-gpus"}
    )
    assert shared.reservation_projects == ("my-project", "shared-gpus")


def test_what_the_operator_fixes_is_never_silently_replaced():
    """Issue 39: fixed() substituted the operator's reservation, accelerator and selector values for the config's
    own before the rules were checked, so a config asking for others was SUBMITTED with the operator's values."""
    policy = Policy(reservation="a4-res", accelerator="H200", node_selector={"pool": "gpu"})
    asking = cfg(
        scaling={
            "reservation": "team-b-res",
            "accelerator": "B200",
            "gpus_per_node": 8,
            "node_selector": {"pool": "cpu"},
        }
    )
    applied = policy.fixed(asking)
    assert (applied.scaling.reservation, applied.scaling.accelerator, applied.scaling.node_selector["pool"]) == (
        "team-b-res",
        "B200",
        "cpu",
    )
    rules = sorted(v.split(":")[0] for v in policy.violations(applied, OWN))
    assert rules == ["policy accelerator", "policy node_selector", "policy reservation"]
