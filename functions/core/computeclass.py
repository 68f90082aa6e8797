"""A run's `scaling.capacity` list as a GKE ComputeClass: one priority per option, in order, each for the run's
whole GPU node (machine type and GPUs), so GKE tries a reservation first, then flex-start, Spot or on-demand.

GKE facts this follows (cited; read 2026-12):
- Custom ComputeClasses (`cloud.google.com/v1`, cluster-scoped; Autopilot from 1.30.3-gke.1451000): pods select
  one with the node selector `cloud.google.com/compute-class: NAME`; GKE provisions nodes by `spec.priorities`,
  falling back in order (https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes).
- Priority fields (https://cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass): `machineType`,
  `gpu: {type, count, driverVersion}`, `spot: true`, `flexStart: {enabled: true}`, `maxRunDurationSeconds`, `reservations:
  {affinity: Specific, specific: [{name, project, reservationBlock: {name}}]}`; `whenUnsatisfiable: DoNotScaleUp`
  keeps GKE from placing GPU pods on anything the class does not list.
- Flex-start (Dynamic Workload Scheduler) VMs live up to seven days (`maxRunDurationSeconds`, default 7 days):
  https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start-vms. Spot VMs are preempted with a 30 s
  notice: https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms.
- Nodes of a custom class carry the taint `cloud.google.com/compute-class=NAME:NoSchedule` (GKE adds the matching
  toleration to pods that select the class; the worker template carries it too, so nothing depends on that).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from functions.core.capacity import KINDS
from functions.core.config import (
    COMPUTE_CLASS_LABEL,
    GKE_ACCELERATORS,
    ScalingSpec,
    image_cache_match,
)
from functions.core.gpu_shapes import MACHINE_TYPES

API_VERSION = "cloud.google.com/v1"
# The oldest GKE that has everything rendered here: custom compute classes on Autopilot from 1.30.3-gke.1451000
# (about-custom-compute-classes), flex-start GPUs from 1.32.2-gke.1652000
# (https://cloud.google.com/kubernetes-engine/docs/concepts/dws#requirements). terraform/gke.tf asks for it and
# `raytune doctor` checks a cluster's version against it.
MIN_GKE_VERSION = "1.32.2-gke.1652000"
DESCRIPTION_ANNOTATION = "raytune.dev/capacity"


def priorities(scaling: ScalingSpec, image_cache: str | None = None) -> list[dict[str, Any]]:
    """One ComputeClass priority per capacity option, each for a whole worker node of the run; with `image_cache`
    (cluster.image_cache), each attaches the disk image as the node's image cache, as Google's ComputeClass
    reference does (`storage.secondaryBootDisks`), since no Google source says node auto-provisioning honours the
    pod's node-restriction label beside a ComputeClass."""
    assert scaling.capacity is not None, "only a capacity list has a ComputeClass"
    gpu = {"type": GKE_ACCELERATORS[scaling.accelerator], "count": scaling.gpus_per_node, "driverVersion": "latest"}
    # Every priority names its machine type: validation admits only shapes that have one (gpu_shapes.py).
    node: dict[str, Any] = {"machineType": MACHINE_TYPES[(scaling.accelerator, scaling.gpus_per_node)], "gpu": gpu}
    if image_cache:
        node["storage"] = {"secondaryBootDisks": [secondary_boot_disk(image_cache)]}
    rules = []
    for option in scaling.capacity:
        rules.append({**copy.deepcopy(node), **KINDS[option.kind].priority(option)})
    return rules


def secondary_boot_disk(image_cache: str) -> dict[str, str]:
    """The disk image as a ComputeClass priority names it: its name and project in fields of their own (a
    domain-scoped project, `example.com:proj`, as it is: no label value has to hold it)."""
    match = image_cache_match(image_cache)
    return {"diskImageName": match[2], "project": match[1], "mode": "CONTAINER_IMAGE_CACHE"}


def class_name(scaling: ScalingSpec, image_cache: str | None = None) -> str:
    """Named from what it renders: runs asking for the same list share one ComputeClass, a changed list is
    another object (a ComputeClass in use is never rewritten under a running group)."""
    digest = hashlib.sha256(json.dumps(priorities(scaling, image_cache), sort_keys=True).encode()).hexdigest()
    return f"raytune-{digest[:12]}"


def compute_class(
    scaling: ScalingSpec, labels: dict[str, str], image_cache: str | None = None
) -> dict[str, Any] | None:
    """The ComputeClass of a run's capacity list; None when the run has none (a CPU run, or the reference's
    reservation through node selectors)."""
    if not renders(scaling) or scaling.capacity is None:
        return None
    offers = "raytune GPU workers: " + ", then ".join(o.describe() for o in scaling.capacity)
    return {
        "apiVersion": API_VERSION,
        "kind": "ComputeClass",
        # What it offers, for whoever reads it with kubectl, as an annotation: spec.description is not in every
        # supported GKE version's CRD, and a strict apply of a field the cluster's CRD lacks fails the run.
        "metadata": {
            "name": class_name(scaling, image_cache),
            "labels": labels,
            "annotations": {DESCRIPTION_ANNOTATION: offers},
        },
        "spec": {
            "priorities": priorities(scaling, image_cache),
            "nodePoolAutoCreation": {"enabled": True},
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }


def renders(scaling: ScalingSpec) -> bool:
    """Whether the run's GPU nodes come through a ComputeClass (a GPU run with a capacity list)."""
    return scaling.capacity is not None and scaling.use_gpu


def selector(scaling: ScalingSpec, image_cache: str | None = None) -> dict[str, str]:
    return {COMPUTE_CLASS_LABEL: class_name(scaling, image_cache)} if renders(scaling) else {}


def tolerations(scaling: ScalingSpec, image_cache: str | None = None) -> list[dict[str, str]]:
    """What a worker pod needs to land on the class's nodes: the class's own taint, and Spot's where the list
    has Spot (Autopilot taints Spot nodes cloud.google.com/gke-spot=true:NoSchedule)."""
    if not renders(scaling):
        return []
    assert scaling.capacity is not None
    name = class_name(scaling, image_cache)
    found = [{"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": name, "effect": "NoSchedule"}]
    for kind in dict.fromkeys(o.kind for o in scaling.capacity):  # each kind's taint once, in the list's order
        if (taint := KINDS[kind].taint) is not None:
            found.append(dict(taint))
    return found
