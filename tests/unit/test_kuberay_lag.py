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
