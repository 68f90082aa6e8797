"""Why a submitted job still waits, in one line, from its RayCluster's pods and their Events (plain
Kubernetes JSON). Pure: the GKE adapter reads the objects, the watcher writes the line into the record."""

from __future__ import annotations

from typing import Any

from functions.core.kuberay_lag import GROUP_LABEL, NODE_TYPE_LABEL, labels_of

LIMIT = 300
PULL = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
BROKEN = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})


def _container_trouble(pod: dict[str, Any], spec_images: dict[str, str]) -> list[str]:
    found = []
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PULL:
            image = cs.get("image") or spec_images.get(cs.get("name", ""), "?")
            found.append(f"{reason} for image {image}")
        elif reason in BROKEN:
            last = (cs.get("lastState") or {}).get("terminated") or {}
            detail = last.get("message") or last.get("reason") or waiting.get("message") or ""
            code = f" exit code {last['exitCode']}" if "exitCode" in last else ""
            found.append(f"{reason}{code}" + (f": {detail.strip().splitlines()[-1]}" if detail.strip() else ""))
    return found


def _unscheduled(pod: dict[str, Any], events: list[dict[str, Any]]) -> str | None:
    status = pod.get("status") or {}
    if status.get("phase") != "Pending":
        return None
    warnings = [e for e in events if e.get("type") == "Warning" and e.get("message")]
    if warnings:
        last = warnings[-1]
        return f"{last.get('reason', 'Warning')}: {last['message']}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}".rstrip(": ")
    return None


def explain(pods: list[dict[str, Any]], events: dict[str, list[dict[str, Any]]]) -> str | None:
    """The distinct troubles of the pods (pull errors with their image, crash loops with the last
    termination message, scheduling failures with the scheduler's words), or None when there are none."""
    troubles: list[str] = []
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        images = {c.get("name", ""): c.get("image", "?") for c in (pod.get("spec") or {}).get("containers") or []}
        found = _container_trouble(pod, images)
        if not found and (why := _unscheduled(pod, events.get(name, []))):
            found = [why]
        for trouble in found:
            line = f"pod {name}: {trouble}"
            if not any(line.split(": ", 1)[1] == t.split(": ", 1)[1] for t in troubles):
                troubles.append(line)
    if not troubles:
        return None
    text = "; ".join(troubles)
    return text if len(text) <= LIMIT else text[: LIMIT - 3] + "..."


def own_pods(pods: list[dict[str, Any]], group: str) -> list[dict[str, Any]]:
    """The pods a run's job waits on: the RayCluster's head and the run's own worker group (other runs' groups
    share the RayCluster, and their waits are theirs)."""
    return [
        pod for pod in pods if labels_of(pod).get(NODE_TYPE_LABEL) == "head" or labels_of(pod).get(GROUP_LABEL) == group
    ]


def bound(pods: list[dict[str, Any]], group: str) -> bool:
    """Whether a worker pod of the run's group is bound to a node (its capacity came; it may still be starting)."""
    return any(labels_of(pod).get(GROUP_LABEL) == group and (pod.get("spec") or {}).get("nodeName") for pod in pods)
