"""When the watcher asks KubeRay to look at a RayCluster again (functions/core/kuberay_lag.py): only when every pod
has been ready a while and the status still says otherwise, at most once a minute, and the patch it sends."""

from __future__ import annotations

import datetime as dt

import jsonpatch
import pytest

from functions.core import kuberay_lag

NOW = dt.datetime(2026, 12, 6, 22, 0, tzinfo=dt.UTC)


def at(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(ready_ago: float | None, phase: str = "Running", deleting: bool = False) -> dict:
    conditions = [{"type": "Ready", "status": "True" if ready_ago is not None else "False"}]
    if ready_ago is not None:
        conditions[0]["lastTransitionTime"] = at(ready_ago)
    meta = {"name": "p", **({"deletionTimestamp": at(1)} if deleting else {})}
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}


def cluster(state: str | None = None, asked_ago: float | None = None, annotated: bool = True) -> dict:
    meta: dict = {"name": "gemma3-tuning"}
    if annotated:
        meta["annotations"] = {"raytune.dev/allocation": "7"}
        if asked_ago is not None:
            meta["annotations"][kuberay_lag.ASKED_ANNOTATION] = at(asked_ago)
    return {"metadata": meta, "status": {"state": state} if state else {}}


@pytest.mark.parametrize(
    ("case", "seen", "pods", "lags"),
    [
        ("all pods ready 40 s, no state", cluster(), [pod(200), pod(40)], True),
        ("a pod became ready 10 s ago: KubeRay may not have seen it yet", cluster(), [pod(200), pod(10)], False),
        ("a pod not ready", cluster(), [pod(200), pod(None)], False),
        ("a pod still pending", cluster(), [pod(200), pod(None, phase="Pending")], False),
        ("a pod going", cluster(), [pod(200), pod(100, deleting=True)], False),
        ("ready: never taken back, nothing lags", cluster("ready"), [pod(200)], False),
        ("asked 20 s ago", cluster(asked_ago=20), [pod(200)], False),
        ("asked 90 s ago and still behind", cluster(asked_ago=90), [pod(200)], True),
        ("no pods at all", cluster(), [], False),
        ("no RayCluster", None, [pod(200)], False),
    ],
)
def test_when_the_status_lags(case, seen, pods, lags):
    said = kuberay_lag.lag(seen, pods, NOW)
    assert (said is not None) == lags, case
    if lags:
        assert "gemma3-tuning" in said and f"all its {len(pods)} pods" in said


def test_it_says_the_state_and_how_long():
    said = kuberay_lag.lag(cluster(), [pod(45)], NOW)
    assert said is not None and "'no state' 45s after all its 1 pods were ready" in said


@pytest.mark.parametrize(
    ("job", "waits"),
    [
        ({"jobDeploymentStatus": "Initializing", "rayClusterStatus": {}}, True),
        ({"jobDeploymentStatus": "Initializing", "rayClusterStatus": {"state": "ready"}}, False),
        ({"jobDeploymentStatus": "Running", "rayClusterStatus": {}}, False),
        (None, False),
    ],
)
def test_only_a_job_held_for_its_clusters_state_is_looked_at(job, waits):
    assert kuberay_lag.waits_for_cluster(job) == waits


@pytest.mark.parametrize("annotated", [True, False])
def test_the_request_is_an_annotation_with_the_time(annotated):
    seen = cluster(annotated=annotated)
    patched = jsonpatch.apply_patch(seen, kuberay_lag.ask(seen, NOW))
    assert patched["metadata"]["annotations"][kuberay_lag.ASKED_ANNOTATION] == "2026-12-06T22:00:00+00:00"
    if annotated:
        assert patched["metadata"]["annotations"]["raytune.dev/allocation"] == "7"
    # what it wrote is what the next look reads: no second request within the minute
    assert kuberay_lag.lag(patched, [pod(200)], NOW + dt.timedelta(seconds=30)) is None


def labelled(ready_ago: float | None, node_type: str, group: str, phase: str = "Running") -> dict:
    """A pod of a group as KubeRay labels it: on a node when it is running, named after its group."""
    found = pod(ready_ago, phase)
    found["metadata"] |= {"name": f"{group}-pod", "labels": {"ray.io/node-type": node_type, "ray.io/group": group}}
    if phase == "Running":
        found["spec"] = {"nodeName": f"node-of-{group}"}
    return found


HEAD = labelled(300, "head", "headgroup")
A_WAITS = labelled(None, "worker", "run-a", phase="Pending")
B_READY = labelled(60, "worker", "run-b")
NO_CAPACITY = [{"reason": "FailedScheduling"}, {"reason": "NotTriggerScaleUp"}]  # GKE's autoscaler: none
PROVISIONING = [{"reason": "FailedScheduling"}, {"reason": "TriggeredScaleUp"}]  # its node is being made
STOCKOUT = [{"reason": "TriggeredScaleUp"}, {"reason": "FailedScaleUp"}]  # tried, and GCE had none
BOTH = {"run-a": 1, "run-b": 1}


@pytest.mark.parametrize(
    ("case", "spec", "pods", "events", "held"),
    [
        ("a: no capacity; b ready: a is held", BOTH, [HEAD, A_WAITS, B_READY], NO_CAPACITY, {"run-a"}),
        ("a: the scale-up failed; b ready: a is held", BOTH, [HEAD, A_WAITS, B_READY], STOCKOUT, {"run-a"}),
        ("a's node is being made: waited for", BOTH, [HEAD, A_WAITS, B_READY], PROVISIONING, set()),
        ("a just made, nothing said yet: waited for", BOTH, [HEAD, A_WAITS, B_READY], [], set()),
        ("a held already (at zero in the spec): stays held", {**BOTH, "run-a": 0}, [HEAD, B_READY], [], {"run-a"}),
        ("nothing ready to let through", BOTH, [HEAD, A_WAITS], NO_CAPACITY, set()),
        ("the head not ready", BOTH, [labelled(None, "head", "h"), A_WAITS, B_READY], NO_CAPACITY, set()),
        ("no pods read (a RayCluster that is ready)", BOTH, [], [], set()),
        ("one group, waiting: no other run waits on it", {"run-a": 1}, [HEAD, A_WAITS], NO_CAPACITY, set()),
    ],
)
def test_a_group_waiting_for_capacity_on_a_new_raycluster_is_held_while_another_is_ready(
    case, spec, pods, events, held
):
    assert kuberay_lag.unscheduled(pods) == (["run-a-pod"] if A_WAITS in pods else [])
    head_ready, groups = kuberay_lag.pods_ready(pods, {"run-a-pod": events})
    assert kuberay_lag.held(BOTH, spec, head_ready, groups) == held, case
