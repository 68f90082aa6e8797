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

Neither Event is certain: KubeRay records them through client-go's recorder, whose spam filter
(EventSourceObjectSpamFilter, tools/record/events_cache.go: a burst of 25 per source and object, then one every
5 minutes) drops them on a RayCluster whose earlier runs created and deleted their share of worker pods. And a
preempted Spot VM in a managed instance group comes back under the same instance name, so a node's name is not its
identity. What the platform cannot drop is the Node object itself: its uid changes when it is deleted and made
again, its `status.nodeInfo.bootID` when its VM boots again, and its Ready condition turns False when the kubelet
starts a graceful shutdown (Spot preemption) or stops posting (NodeLost). The watcher keeps each node's identity
as it first saw the run running there (`identity`), and a failed job's nodes are compared with it
(`node_changes`): a signal read, not recorded, so it costs no Event budget and holds nothing up.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from functions.core import kubetime

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
# The kubelet's node-pressure eviction says "Evicted" on the pod (pkg/kubelet/eviction), which KubeRay then deletes.
EVENT_REASONS = frozenset(
    {"TaintManagerEviction", "NodeNotReady", "Preempted", "Preempting", "NodeShutdown", "Evicted"}
)
RAY_NODE_LOSS = re.compile(
    r"NodeDiedError|node (?:has )?died|its node (?:was|has been) (?:terminated|marked dead)|"
    r"marked (?:as )?dead|raylet (?:has )?died|node .{0,80}? (?:was )?(?:preempted|terminated unexpectedly)",
    re.IGNORECASE,
)
LINE_LIMIT = 240
# KubeRay's Event when it deletes an unhealthy worker pod (scale-downs say "Deleted Pod NS/NAME" without a status).
KUBERAY_DELETED = re.compile(r"Deleted worker Pod (?P<namespace>[^/\s]+)/(?P<pod>\S+); Pod status: Failed")


def _event_time(event: dict[str, Any]) -> dt.datetime | None:
    """When an Event last happened (events.k8s.io's eventTime where core's lastTimestamp is not set)."""
    return kubetime.parsed(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp"))


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
                when = kubetime.parsed(condition.get("lastTransitionTime"))
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


def identity(node: dict[str, Any]) -> str:
    """Who a node is beyond its name: its object's uid and its VM's boot ("uid/bootID")."""
    uid = (node.get("metadata") or {}).get("uid") or ""
    boot = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""
    return f"{uid}/{boot}"


def node_changes(
    recorded: dict[str, str], now: dict[str, dict[str, Any] | None], ended: dt.datetime | None = None
) -> list[str]:
    """The run's nodes, each with the identity it had while the run ran there (`identity`; '' where it was never
    read, as in records of older releases), against the same names read now (None: no such node): those gone, made
    again or booted again lost what they ran; one that stopped being Ready lost it only if that happened before the
    job ended (`ended`: its end time; None: unknown, so any time before now). A cordon or a taint alone takes
    nothing: the pods on the node run on (the pods' own conditions say when a drain evicted them: from_pods). A boot
    id read as empty is unknown, never a new boot."""
    found = []
    for name, was in recorded.items():
        node = now.get(name)
        if node is None:
            what = "gone from the cluster (its VM was deleted or preempted)"
        elif (why := _remade(was, identity(node)) or _not_ready(node, ended)) is not None:
            what = why
        else:
            continue
        found.append(f"node {name}: {what}"[:LINE_LIMIT])
    return found


def _remade(was: str, now: str) -> str | None:
    """How a node under the same name is another than the one recorded: another uid, or another boot (an empty
    part on either side is unknown)."""
    if not was or was == now:
        return None
    uid, boot = was.split("/", 1)
    new_uid, new_boot = now.split("/", 1)
    if uid and new_uid and new_uid != uid:
        return "deleted and made again under its name since the run ran there (its VM was recreated)"
    if boot and new_boot and new_boot != boot:
        return f"booted again since the run ran there (boot {boot[:8]} then {new_boot[:8]}: its VM was preempted or recreated)"
    return None


def _not_ready(node: dict[str, Any], ended: dt.datetime | None) -> str | None:
    """Why a node that still exists stopped running what it ran: its Ready condition turned False or Unknown (a
    graceful shutdown, a kubelet that stopped posting) before the job ended."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            when = kubetime.parsed(condition.get("lastTransitionTime"))
            if when is None or (ended is not None and when > ended):
                return None  # not known to have happened before the job ended: its end was its own
            said = " ".join(str(condition.get(k) or "") for k in ("reason", "message")).strip()
            return f"not Ready ({said or condition.get('status')}) since {when:%Y-%m-%d %H:%M:%S}Z"
    return None


def from_ray(job: dict[str, Any] | None) -> list[str]:
    """Ray's own word in the job's message that a node of the job died."""
    message = str((job or {}).get("message") or "")
    hit = RAY_NODE_LOSS.search(message)
    if hit is None:
        return []
    start = max(0, hit.start() - 60)
    return [f"Ray: ...{' '.join(message[start : hit.end() + 120].split())}"[:LINE_LIMIT]]
