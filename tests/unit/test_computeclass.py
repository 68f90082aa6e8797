"""scaling.capacity as a GKE ComputeClass: each example list rendered, checked against the CRD reference's schema
(vendored: tests/data/computeclass) and Autopilot's GPU rules, selected by the run's worker group; and the
operator's policy over it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from functions.core import computeclass, manifests
from functions.core.capacity import FLEX_START_MAX_SECONDS
from functions.core.config import RunConfig
from functions.core.policy import Policy

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "computeclass" / "computeclass.schema.json").read_text())
RESERVATION = {"kind": "reservation", "name": "a4-res", "project": "shared-gpus-1", "block": "block-1"}
LISTS = {
    "the reference's reservation": [{"kind": "reservation", "name": "a4-res"}],
    "reservation, then flex-start, Spot, on-demand": [
        RESERVATION,
        {"kind": "flex-start", "max_run_seconds": 86400},
        {"kind": "spot"},
        {"kind": "on-demand"},
    ],
    "flex-start, then on-demand": [{"kind": "flex-start"}, {"kind": "on-demand"}],
    "Spot only": [{"kind": "spot"}],
}


def config(capacity, **scaling) -> RunConfig:
    return RunConfig.model_validate({"scaling": {"capacity": capacity, **scaling}})


def autopilot_gpu_rules(obj: dict) -> list[str]:
    broken = []
    spec = obj["spec"]
    if spec.get("whenUnsatisfiable") != "DoNotScaleUp":
        broken.append("a GPU class must not scale up nodes it does not list")
    for i, rule in enumerate(spec["priorities"]):
        if "gpu" not in rule or not rule["gpu"].get("type") or rule["gpu"].get("count", 0) < 1:
            broken.append(f"priority {i}: a GPU priority names its GPU type and count")
        if rule.get("spot") and rule.get("flexStart", {}).get("enabled"):
            broken.append(f"priority {i}: Spot and flex-start in one priority")
        if rule.get("maxRunDurationSeconds", 0) > FLEX_START_MAX_SECONDS:
            broken.append(f"priority {i}: maxRunDurationSeconds beyond seven days")
        reservations = rule.get("reservations")
        if reservations and reservations["affinity"] == "Specific" and not reservations.get("specific"):
            broken.append(f"priority {i}: a Specific affinity names its reservations")
    return broken


@pytest.mark.parametrize("capacity", LISTS.values(), ids=LISTS.keys())
def test_each_list_renders_a_valid_compute_class_that_its_worker_group_selects(capacity):
    cfg = config(capacity)
    obj = computeclass.compute_class(cfg.scaling, manifests.ownership("dep-1"))
    jsonschema.validate(obj, SCHEMA)
    assert autopilot_gpu_rules(obj) == []
    rules = obj["spec"]["priorities"]
    assert len(rules) == len(capacity)
    assert all(r["machineType"] == "a4-highgpu-8g" and r["gpu"]["type"] == "nvidia-b200" for r in rules)
    assert all(r["gpu"]["count"] == 8 for r in rules)
    group = manifests.worker_group(cfg, "run-a", 2, [], "h")
    pod = group["template"]["spec"]
    name = obj["metadata"]["name"]
    assert pod["nodeSelector"]["cloud.google.com/compute-class"] == name
    # the class decides GPUs and where they come from: no accelerator or reservation selectors beside it
    assert not {"cloud.google.com/gke-accelerator", "cloud.google.com/reservation-name"} & set(pod["nodeSelector"])
    assert {"key": "cloud.google.com/compute-class", "operator": "Equal", "value": name, "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    assert any(t["key"] == "cloud.google.com/gke-spot" for t in pod["tolerations"]) == any(
        o["kind"] == "spot" for o in capacity
    )
    assert obj["metadata"]["labels"][manifests.OWNER_LABEL] == "dep-1"


def test_the_full_fallback_list_as_rendered():
    obj = computeclass.compute_class(config(LISTS["reservation, then flex-start, Spot, on-demand"]).scaling, {})
    node = {"machineType": "a4-highgpu-8g", "gpu": {"type": "nvidia-b200", "count": 8, "driverVersion": "latest"}}
    assert obj["spec"]["priorities"] == [
        {
            **node,
            "reservations": {
                "affinity": "Specific",
                "specific": [{"name": "a4-res", "project": "shared-gpus-1", "reservationBlock": {"name": "block-1"}}],
            },
        },
        {**node, "flexStart": {"enabled": True}, "maxRunDurationSeconds": 86400},
        {**node, "spot": True},
        node,
    ]
    assert "description" not in obj["spec"]  # not in every supported GKE version's CRD: an annotation instead
    assert obj["metadata"]["annotations"][computeclass.DESCRIPTION_ANNOTATION] == (
        "raytune GPU workers: reservation shared-gpus-1/a4-res (block block-1), then flex-start, then spot, "
        "then on-demand"
    )


def test_the_class_is_named_from_what_it_renders():
    a, b = config([{"kind": "spot"}]), config([{"kind": "spot"}], nodes=4)
    assert computeclass.class_name(a.scaling) == computeclass.class_name(b.scaling)  # the same node, the same class
    assert computeclass.class_name(a.scaling) != computeclass.class_name(config([{"kind": "on-demand"}]).scaling)
    h100 = config([{"kind": "spot"}], accelerator="H100", gpus_per_node=4)
    assert computeclass.priorities(h100.scaling)[0]["machineType"] == "a3-highgpu-4g"


def test_no_capacity_list_renders_the_reference_node_selectors_and_no_class():
    cfg = RunConfig.model_validate({"scaling": {"reservation": "a4-res"}})
    assert computeclass.compute_class(cfg.scaling, {}) is None
    selector = manifests.worker_group(cfg, "run-a", 2, [], "h")["template"]["spec"]["nodeSelector"]
    assert selector["cloud.google.com/reservation-name"] == "a4-res"
    assert "cloud.google.com/compute-class" not in selector


@pytest.mark.parametrize(
    ("scaling", "error"),
    [
        ({"capacity": [{"kind": "reservation"}]}, "a reservation option needs its name"),
        ({"capacity": [{"kind": "spot", "name": "x"}]}, "a spot option has none"),
        ({"capacity": [{"kind": "spot", "max_run_seconds": 3600}]}, "max_run_seconds is flex-start's"),
        ({"capacity": [{"kind": "flex-start", "max_run_seconds": 8 * 86400}]}, "less than or equal to 604800"),
        ({"capacity": [{"kind": "spot"}, {"kind": "spot"}]}, "lists an option twice"),
        ({"capacity": [{"kind": "spot"}], "reservation": "r"}, "both say where nodes come from"),
        ({"capacity": [{"kind": "spot"}], "gpus_per_node": 0}, "a CPU run"),
        ({"capacity": []}, "at least 1 item"),
        (
            {"capacity": [{"kind": "spot"}], "node_selector": {"cloud.google.com/gke-spot": "true"}},
            "which scaling.capacity decides",
        ),
    ],
)
def test_bad_capacity_lists_are_config_errors(scaling, error):
    with pytest.raises(ValidationError, match=error):
        RunConfig.model_validate({"scaling": scaling})


def test_the_operators_default_list_fills_in_where_a_config_gives_none():
    policy = Policy(capacity=(RESERVATION, {"kind": "spot"}), reservation="a4-res")  # type: ignore[arg-type]
    fixed = policy.fixed(RunConfig())
    assert [o.kind for o in fixed.scaling.capacity] == ["reservation", "spot"] and fixed.scaling.reservation is None
    assert policy.violations(fixed, ()) == []  # the operator's own list is within its rules
    cpu = RunConfig.model_validate({"scaling": {"gpus_per_node": 0}})
    assert policy.fixed(cpu).scaling.capacity is None
    # without a default list, the operator's reservation is the node selectors, as before
    assert Policy(reservation="a4-res").fixed(RunConfig()).scaling.reservation == "a4-res"


@pytest.mark.parametrize(
    ("policy", "capacity", "rule"),
    [
        (Policy(reservation="a4-res"), [{"kind": "on-demand"}], "policy capacity_kinds: scaling.capacity asks for"),
        (Policy(reservation="a4-res"), [{"kind": "reservation", "name": "other"}], "policy reservation"),
        (Policy(capacity_kinds=("spot",)), [{"kind": "flex-start"}], "the operator allows ['spot']"),
    ],
)
def test_the_policy_decides_which_options_a_config_may_ask_for(policy, capacity, rule):
    found = policy.violations(policy.fixed(config(capacity)), ())
    assert any(rule in v for v in found), found


def test_a_fixed_reservation_with_kinds_listed_lets_configs_fall_back():
    policy = Policy(reservation="a4-res", capacity_kinds=("reservation", "spot"))
    cfg = policy.fixed(config([{"kind": "reservation", "name": "a4-res"}, {"kind": "spot"}]))
    assert not [v for v in policy.violations(cfg, ()) if "capacity" in v or "reservation" in v]


CACHE = "projects/{project}/global/images/raytune-trainer-0123456789ab"


@pytest.mark.parametrize("project", ["my-project", "example.com:my-project"])
def test_an_image_cache_beside_a_capacity_list_is_attached_by_the_compute_class(project):
    """As Google's ComputeClass reference does (priorities[].storage.secondaryBootDisks), held against the CRD's
    schema: the worker pods select the class alone, with no node-restriction label beside it; a domain-scoped
    project is named in its field as it is."""
    cache = CACHE.format(project=project)
    cfg = RunConfig.model_validate({"scaling": {"capacity": LISTS["Spot only"]}, "cluster": {"image_cache": cache}})
    obj = manifests.assemble(cfg, "run-a", {}, "h").capacity
    assert obj is not None
    jsonschema.validate(obj, SCHEMA)
    disks = [rule["storage"]["secondaryBootDisks"] for rule in obj["spec"]["priorities"]]
    assert disks == [
        [{"diskImageName": "raytune-trainer-0123456789ab", "project": project, "mode": "CONTAINER_IMAGE_CACHE"}]
    ]
    pod = manifests.worker_group(cfg, "run-a", 2, [], "h")["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/compute-class"] == obj["metadata"]["name"]
    assert not any("gke-secondary-boot-disk" in key for key in pod["nodeSelector"])
    assert obj["metadata"]["name"] != computeclass.class_name(cfg.scaling), "a cache is another class"


def test_a_domain_scoped_cache_without_a_compute_class_is_refused_with_the_reason():
    cache = CACHE.format(project="example.com:my-project")
    with pytest.raises(ValidationError, match="domain-scoped project, which a node selector cannot name"):
        RunConfig.model_validate({"cluster": {"image_cache": cache}})
    plain = RunConfig.model_validate({"cluster": {"image_cache": CACHE.format(project="my-project")}})
    pod = manifests.worker_group(plain, "run-a", 2, [], "h")["template"]["spec"]
    key = "cloud.google.com.node-restriction.kubernetes.io/gke-secondary-boot-disk-raytune-trainer-0123456789ab"
    assert pod["nodeSelector"][key] == "CONTAINER_IMAGE_CACHE.my-project", "the label, where no class attaches it"
