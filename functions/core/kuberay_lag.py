"""When KubeRay's status of a RayCluster lags its pods, and the watcher asks it to look again. Pure.

KubeRay writes a RayCluster's status only from a reconcile, and a reconcile whose status write conflicts (a spec
patch of the controller landed meanwhile) returns an error: controller-runtime then retries it with its per-item
exponential backoff (5 ms doubling, up to 1000 s) and ignores the 2 s requeue KubeRay asked for. Only a change of
the spec, a label or an annotation (the predicates KubeRay 1.5.2 watches RayClusters with) or of one of its pods
triggers one sooner. So after a burst of launches on a new RayCluster, the reconcile that followed the last pod
becoming ready can meet the last patch, and nothing reconciles the RayCluster again for minutes: its state stays
short of `ready` (which, once reached, KubeRay never takes back), and KubeRay holds every RayJob on it in
Initializing. An annotation written by the watcher is such a trigger; it is written when every pod of the
RayCluster has been ready for a while and its state still says otherwise, at most once a minute.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from functions.core import kubetime

# The watcher's request, its time as value: a change KubeRay's AnnotationChangedPredicate lets through.
ASKED_ANNOTATION = "raytune.dev/status-asked-at"
# KubeRay writes a status within a second or two of a pod change; 30 s of all pods ready is a status left behind.
LAG_SECONDS = 30
ASK_EVERY_SECONDS = 60  # one request a minute at most, however many runs wait on the cluster


def waits_for_cluster(job: dict[str, Any] | None) -> bool:
    """Whether KubeRay holds the RayJob back for its RayCluster's state (it copies that status into the job's)."""
    if job is None or job.get("jobDeploymentStatus") != "Initializing":
        return False
    return (job.get("rayClusterStatus") or {}).get("state") != "ready"


def lag(cluster: dict[str, Any] | None, pods: list[dict[str, Any]], now: dt.datetime) -> str | None:
    """Why KubeRay should look at the RayCluster again (its status is behind its pods, and it was not asked within
    the last minute), or None."""
    if cluster is None or not pods or (cluster.get("status") or {}).get("state") == "ready":
        return None
    since = [_ready_since(pod) for pod in pods]
    if any(t is None for t in since):
        return None  # a pod still starting: KubeRay has something to wait for
    ready_for = (now - max(t for t in since if t is not None)).total_seconds()
    if ready_for < LAG_SECONDS:
        return None
    asked = kubetime.parsed(((cluster.get("metadata") or {}).get("annotations") or {}).get(ASKED_ANNOTATION))
    if asked is not None and (now - asked).total_seconds() < ASK_EVERY_SECONDS:
        return None
    state = (cluster.get("status") or {}).get("state") or "no state"
    name = (cluster.get("metadata") or {}).get("name", "?")
    return (
        f"KubeRay's status of RayCluster {name} still said {state!r} {int(ready_for)}s after all its {len(pods)} pods "
        "were ready (KubeRay writes it only from a reconcile, and backs off after a failed one)"
    )


def ask(cluster: dict[str, Any], now: dt.datetime) -> list[dict[str, Any]]:
    """The JSON patch that asks: the annotation, set to `now` (the annotations map made where there is none)."""
    stamp = now.astimezone(dt.UTC).isoformat(timespec="seconds")
    if not (cluster.get("metadata") or {}).get("annotations"):  # none, or an empty map: the map made with it
        return [{"op": "add", "path": "/metadata/annotations", "value": {ASKED_ANNOTATION: stamp}}]
    return [{"op": "add", "path": "/metadata/annotations/" + ASKED_ANNOTATION.replace("/", "~1"), "value": stamp}]


def _ready_since(pod: dict[str, Any]) -> dt.datetime | None:
    """When a running pod became Ready; None while it is not (or says no time)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return None
    return kubetime.parsed(ready.get("lastTransitionTime"))


# KubeRay's labels on a RayCluster's pods (ray-operator/controllers/ray/utils/constant.go).
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"


# What GKE's cluster autoscaler says of a pod it cannot find capacity for (its Events on the pod), against
# TriggeredScaleUp for one whose node is being made: https://cloud.google.com/kubernetes-engine/docs/how-to/
# cluster-autoscaler-visibility (noScaleUp, scaleUp failures), as Events with these reasons.
NO_CAPACITY_EVENTS = frozenset({"NotTriggerScaleUp", "FailedScaleUp"})


@dataclasses.dataclass(frozen=True)
class GroupPods:
    """A worker group's pods as read: how many, how many ready, and how many the autoscaler said it has no capacity
    for (its last word on the pod)."""

    pods: int = 0
    ready: int = 0
    no_capacity: int = 0


def pods_ready(
    pods: list[dict[str, Any]], events: Mapping[str, list[dict[str, Any]]]
) -> tuple[bool, dict[str, GroupPods]]:
    """Of a RayCluster's pods (and the Events of those not yet on a node, by pod name): whether its head is ready,
    and each worker group's pods."""
    head = [pod for pod in pods if labels_of(pod).get(NODE_TYPE_LABEL) == "head"]
    groups: dict[str, GroupPods] = {}
    for pod in pods:
        group = labels_of(pod).get(GROUP_LABEL)
        if not group or labels_of(pod).get(NODE_TYPE_LABEL) == "head":
            continue
        seen = groups.get(group, GroupPods())
        said = [e.get("reason") for e in events.get((pod.get("metadata") or {}).get("name", ""), [])]
        autoscaler = [r for r in said if r in NO_CAPACITY_EVENTS or r == "TriggeredScaleUp"]
        groups[group] = GroupPods(
            seen.pods + 1,
            seen.ready + (_ready_since(pod) is not None),
            seen.no_capacity + bool(autoscaler and autoscaler[-1] in NO_CAPACITY_EVENTS),
        )
    return bool(head) and all(_ready_since(pod) is not None for pod in head), groups


def unscheduled(pods: list[dict[str, Any]]) -> list[str]:
    """The worker pods no node was found for yet, by name: whose Events say whether capacity is coming."""
    return [
        (pod.get("metadata") or {}).get("name", "")
        for pod in pods
        if labels_of(pod).get(NODE_TYPE_LABEL) != "head" and not (pod.get("spec") or {}).get("nodeName")
    ]


def held(
    wanted: dict[str, int], spec: Mapping[str, int], head_ready: bool, groups: Mapping[str, GroupPods]
) -> frozenset[str]:
    """Of a RayCluster KubeRay has never called ready, the worker groups (`wanted`: the allocation's, name -> nodes;
    `spec`: the RayCluster's) to hold at zero: those waiting for capacity (the autoscaler said it has none for a pod
    of theirs, or they are held already: at zero in the spec) while another run's group is ready. KubeRay 1.5.2 calls
    a RayCluster `ready` only when every pod of every group in its spec runs (raycluster_controller.go,
    calculateStatus) and submits a clusterSelector RayJob only to a ready one, so on a new RayCluster one run's wait
    for capacity would hold every other run's job. Held at zero (its pods were waiting anyway), KubeRay calls the
    RayCluster ready, which it never takes back, and the group is sized again. A group whose node is being made or
    whose pods are starting is waited for, as KubeRay waits; nothing is held while the head is not ready, or while
    no other group is."""
    if not head_ready:
        return frozenset()
    asked = {group: nodes for group, nodes in wanted.items() if nodes > 0}
    seen = {group: groups.get(group, GroupPods()) for group in asked}
    done = {group for group, nodes in asked.items() if seen[group].ready >= nodes}
    waiting = {group for group in asked if group not in done and (seen[group].no_capacity or spec.get(group) == 0)}
    return frozenset(waiting) if done and waiting else frozenset()


def labels_of(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}
