"""Whether a run's job ended because it lost its nodes (preempted, shut down, evicted, gone) rather than
because training failed: read from what Kubernetes says of the run's worker pods and what Ray says of the job.

Kubernetes (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions) marks a
pod it takes away with the condition `DisruptionTarget` and one of the reasons below; a Spot VM's preemption
notice on GKE starts the kubelet's graceful node shutdown (https://cloud.google.com/kubernetes-engine/docs/
concepts/spot-vms#termination-graceful-shutdown), which fails the pod with status reason `Terminated` (or
`NodeShutdown`) and the message "Pod was terminated in response to imminent node shutdown". Ray says a task's
node died in the job's message (ray.exceptions.NodeDiedError, ActorDiedError "its node has died").

The real KubeRay operator deletes a Failed worker pod within about a second and makes a new one, long before the
next tick reads the pod. What outlives it: KubeRay's Event on the RayCluster ("Deleted worker Pod NS/NAME; Pod
status: Failed; ...", reason DeletedWorkerPod: ray-operator/controllers/ray/raycluster_controller.go; Events live
an hour), and the node itself, which GKE deletes once its VM is gone.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

DISRUPTION_REASONS = frozenset(
    {
        "PreemptionByScheduler",  # a higher-priority pod took the node
        "DeletionByTaintManager",  # the node became unreachable or not ready (NoExecute taint)
        "EvictionByEvictionAPI",  # drained: node upgrade, maintenance, scale-down
        "DeletionByPodGC",  # its node is gone (the pod was orphaned)
        "TerminationByKubelet",  # graceful node shutdown: a Spot preemption, a flex-start VM's end
    }
)
POD_REASONS = frozenset({"Terminated", "NodeShutdown", "Shutdown", "Evicted", "NodeLost", "Preempting"})
EVENT_REASONS = frozenset({"TaintManagerEviction", "NodeNotReady", "Preempted", "Preempting", "NodeShutdown"})
RAY_NODE_LOSS = re.compile(
    r"NodeDiedError|node (?:has )?died|its node (?:was|has been) (?:terminated|marked dead)|"
    r"marked (?:as )?dead|raylet (?:has )?died|node .{0,80}? (?:was )?(?:preempted|terminated unexpectedly)",
    re.IGNORECASE,
)
LINE_LIMIT = 240
# KubeRay's Event when it deletes an unhealthy worker pod (scale-downs say "Deleted Pod NS/NAME" without a status).
KUBERAY_DELETED = re.compile(r"Deleted worker Pod (?P<namespace>[^/\s]+)/(?P<pod>\S+); Pod status: Failed")


def _at(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _event_time(event: dict[str, Any]) -> dt.datetime | None:
    """When an Event last happened (events.k8s.io's eventTime where core's lastTimestamp is not set)."""
    return _at(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp"))


def _recent(when: dt.datetime | None, since: dt.datetime | None) -> bool:
    return since is None or when is None or when >= since


def _line(pod: str, node: str | None, when: dt.datetime | None, what: str) -> str:
    where = f"node {node}" if node else "its node"
    stamp = f" at {when:%Y-%m-%d %H:%M:%S}Z" if when else ""
    return f"pod {pod} on {where}{stamp}: {' '.join(what.split())}"[:LINE_LIMIT]


def from_pods(pods: list[dict[str, Any]], events: list[dict[str, Any]], since: dt.datetime | None) -> list[str]:
    """The disruptions Kubernetes recorded for the run's worker pods (and the Events of pods since deleted)."""
    found: list[str] = []
    nodes: dict[str, str | None] = {}
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        node = (pod.get("spec") or {}).get("nodeName")
        nodes[name] = node
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
                when = _at(condition.get("lastTransitionTime"))
                if condition.get("reason") in DISRUPTION_REASONS and _recent(when, since):
                    what = f"{condition['reason']}" + (f" ({condition['message']})" if condition.get("message") else "")
                    found.append(_line(name, node, when, what))
                    break
        else:
            if status.get("phase") == "Failed" and status.get("reason") in POD_REASONS:
                what = status["reason"] + (f" ({status['message']})" if status.get("message") else "")
                found.append(_line(name, node, None, what))
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Pod" or event.get("reason") not in EVENT_REASONS:
            continue
        when = _event_time(event)
        if not _recent(when, since):
            continue
        pod = involved.get("name", "?")
        line = _line(pod, nodes.get(pod), when, f"{event['reason']} ({event.get('message') or ''})")
        if not any(f"pod {pod} " in seen for seen in found):
            found.append(line)
    return found


def from_kuberay(events: list[dict[str, Any]], group: str, since: dt.datetime | None) -> list[str]:
    """Worker pods of the run's group that KubeRay deleted as Failed during the attempt, from its Events on the
    RayCluster. An out-of-memory kill is the run's own doing (it would fail again), not a lost node."""
    found = []
    for event in events:
        if (event.get("involvedObject") or {}).get("kind") != "RayCluster" or event.get("reason") != "DeletedWorkerPod":
            continue
        said = str(event.get("message") or "")
        hit = KUBERAY_DELETED.search(said)
        when = _event_time(event)
        if hit is None or f"-{group}-" not in hit["pod"] or "OOMKilled" in said or not _recent(when, since):
            continue
        found.append(_line(hit["pod"], None, when, "failed, and KubeRay deleted it (DeletedWorkerPod)"))
    return found


def gone(nodes: list[str]) -> list[str]:
    """The run's nodes (seen while it ran) that no longer exist: GKE removed their VMs."""
    return [f"node {name}: gone from the cluster (its VM was deleted or preempted)"[:LINE_LIMIT] for name in nodes]


def from_ray(job: dict[str, Any] | None) -> list[str]:
    """Ray's own word in the job's message that a node of the job died."""
    message = str((job or {}).get("message") or "")
    hit = RAY_NODE_LOSS.search(message)
    if hit is None:
        return []
    start = max(0, hit.start() - 60)
    return [f"Ray: ...{' '.join(message[start : hit.end() + 120].split())}"[:LINE_LIMIT]]
