"""Losing nodes and choosing capacity, through the Kubernetes API fake and the real clients: a Spot preemption
as Kubernetes reports it (the pod's DisruptionTarget condition, its Terminated reason, the Events of a pod since
replaced) makes the next attempt, submitted as its own RayJob and kept by the leak sweep; a training failure does
not; `raytune retry`'s message starts an attempt by hand; a capacity list's ComputeClass is applied before the
worker group that selects it."""

from __future__ import annotations

import pytest

from functions.core import computeclass, manifests
from functions.core.allocation import group_name
from functions.core.config import RunConfig
from functions.core.runs import State
from functions.handlers import watch
from functions.local.cloudevents import message_published
from tests.integration.test_functions import QUICK, workers
from tests.integration.test_invariants import DONE, RUNNING, launch, tick

FAILED = {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "message": "Job entrypoint command failed"}


SPOT_NODE = "gke-raytune-a4-spot-1"


def worker(run_id: str, cluster: str = "gemma3-tuning", **status) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{cluster}-{group_name(run_id)}-worker-abcde", "labels": {manifests.RUN_LABEL: run_id}},
        "spec": {"nodeName": SPOT_NODE, "restartPolicy": "Never"},
        "status": status or {"phase": "Running"},
    }


def on_spot(h, run_id: str) -> None:
    """The run's worker runs on a Spot node (the next tick records it)."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": SPOT_NODE, "labels": {"cloud.google.com/gke-spot": "true"}},
    }
    h.kube.put("nodes", node, "")
    h.kube.put("pods", worker(run_id))


def preempt(h, run_id: str, cluster: str = "gemma3-tuning") -> None:
    """What Kubernetes and KubeRay leave when GKE reclaims a Spot VM under a run's worker: the kubelet's graceful
    node shutdown fails the pod, KubeRay deletes it at once (the fake plays it: an Event on the RayCluster, a new
    pod), GKE deletes the node; another pod of the group, replaced earlier, left its taint-manager Event."""
    at = h.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
    group = group_name(run_id)
    shutdown = "Pod was terminated in response to imminent node shutdown."
    h.kube.put(
        "pods",
        worker(
            run_id,
            cluster,
            phase="Failed",
            reason="Terminated",
            message=shutdown,
            conditions=[
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": shutdown,
                    "lastTransitionTime": at,
                }
            ],
        ),
    )
    h.kube.remove("nodes", SPOT_NODE, "")
    h.kube.put(
        "events",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{cluster}-{group}-worker-fghij.1"},
            "involvedObject": {"kind": "Pod", "name": f"{cluster}-{group}-worker-fghij"},
            "reason": "TaintManagerEviction",
            "message": f"Marking for deletion Pod default/{cluster}-{group}-worker-fghij",
            "lastTimestamp": at,
        },
    )


def test_a_preempted_run_finishes_in_its_second_attempt_as_its_own_rayjob(controller, bucket):
    h = controller
    record = launch(h, bucket, "spot-run")
    run_id = record.run_id
    h.kube.set_status("rayjobs", run_id, RUNNING)
    on_spot(h, run_id)
    tick(h)
    assert h.ctx.store.get(run_id).nodes == {SPOT_NODE: "spot"}
    h.clock.advance(600)
    preempt(h, run_id)
    assert [p for p in h.kube.names("pods") if p.endswith("-abcde")] == []  # KubeRay replaced it before any tick
    h.kube.set_status("rayjobs", run_id, FAILED)  # "Job entrypoint command failed": no word of a node
    tick(h)
    queued = h.ctx.store.get(run_id)
    assert queued.state == State.QUEUED and "attempt 1 of 3 lost its nodes: pod gemma3-tuning-run-" in queued.reason
    assert "in 60s, from the run's last checkpoint if it saved one" in queued.reason
    assert h.kube.names("rayjobs") == []  # the lost attempt's RayJob is gone
    assert workers(h)["replicas"] == 2  # its group keeps its nodes for the next attempt
    first = queued.attempts[0]
    assert any("TaintManagerEviction" in line for line in first.lost)
    [deleted] = [line for line in first.lost if "-worker-abcde" in line]
    assert deleted.endswith("failed, and KubeRay deleted it (DeletedWorkerPod)"), first.lost
    assert f"node {SPOT_NODE}: gone from the cluster (its VM was deleted or preempted)" in first.lost
    tick(h)  # within the backoff: nothing
    assert h.ctx.store.get(run_id).state == State.QUEUED and h.kube.names("rayjobs") == []
    h.clock.advance(61)
    tick(h)
    resubmitted = h.ctx.store.get(run_id)
    assert resubmitted.state == State.SUBMITTED and f"RayJob {run_id}-2" in resubmitted.reason
    job = h.kube.get("rayjobs", f"{run_id}-2")
    assert job["spec"]["jobId"] == f"{run_id}-2" and f"--run-id {run_id}" in job["spec"]["entrypoint"]
    assert job["metadata"]["labels"][manifests.RUN_LABEL] == run_id
    h.clock.advance(h.ctx.settings.sweep_grace_s + 60)
    h.kube.set_status("rayjobs", f"{run_id}-2", RUNNING)
    tick(h)  # the leak sweep keeps the live run's current attempt
    assert h.kube.names("rayjobs") == [f"{run_id}-2"] and h.events_of("leak") == []
    h.clock.advance(100)
    h.kube.set_status("rayjobs", f"{run_id}-2", DONE)
    tick(h)
    done = h.ctx.store.get(run_id)
    assert done.state == State.SUCCEEDED and done.settled and workers(h)["replicas"] == 0
    assert [a.number for a in done.attempts] == [1, 2] and done.attempts[1].outcome.startswith("SUCCEEDED")
    # GPU time counts both attempts and the backoff between them (the nodes were held): 600 + 61 + grace+60 + 100 s
    held = (600 + 61 + h.ctx.settings.sweep_grace_s + 60 + 100) * 2
    assert done.gpu_node_seconds == held == sum(a.gpu_node_seconds for a in done.attempts)
    [finished] = h.finished_events()
    assert [a["number"] for a in finished["attempts"]] == [1, 2] and finished["state"] == "SUCCEEDED"
    assert all(a.cost is None for a in done.attempts) and done.cost is None  # no prices set: no cost


COLLECTIVE = "RuntimeError: NCCL communicator was aborted on rank 3: Some NCCL operations have failed or timed out"


def spot_node(boot: str, ready: bool = True, since: str = "2026-12-01T00:00:00Z", taints: list | None = None) -> dict:
    condition = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": since}
    if not ready:
        condition = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "node is shutting down",
            "lastTransitionTime": since,
        }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": SPOT_NODE, "uid": "3f0c-node-uid", "labels": {"cloud.google.com/gke-spot": "true"}},
        "spec": {"taints": taints or [], **({"unschedulable": True} if taints else {})},
        "status": {"nodeInfo": {"bootID": boot}, "conditions": [condition]},
    }


def used_raycluster(h, run_id: str) -> None:
    """The run's RayCluster has served runs before (their worker pods' Events spent its recorder's budget), and the
    run's worker runs on a Spot node the next tick records, with its boot."""
    h.kube.served_runs("gemma3-tuning", 15)
    h.kube.put("nodes", spot_node("boot-1"), "")
    h.kube.put("pods", worker(run_id))


@pytest.mark.parametrize("after", ["booted again", "shutting down"])
def test_a_preemption_on_a_used_raycluster_that_left_no_event_gives_the_run_its_next_attempt(controller, bucket, after):
    """KubeRay's Event for the replaced pod is dropped by client-go's spam filter (25 per object, then one every 5
    minutes), and the Spot VM's node keeps its name: what tells is the node's boot (a VM recreated under its name)
    or its Ready condition (the kubelet's graceful shutdown), read against the identity recorded while it ran."""
    h = controller
    run_id = launch(h, bucket, "used-spot").run_id
    h.kube.set_status("rayjobs", run_id, RUNNING)
    used_raycluster(h, run_id)
    tick(h)
    running = h.ctx.store.get(run_id)
    assert running.nodes == {SPOT_NODE: "spot"} and running.node_ids == {SPOT_NODE: "3f0c-node-uid/boot-1"}
    h.clock.advance(120)
    dropped = h.kube.kuberay_recorder.dropped
    h.kube.put("pods", worker(run_id, phase="Failed", reason="Terminated", message="Pod was terminated"))
    assert h.kube.kuberay_recorder.dropped == dropped + 2  # its DeletedWorkerPod and CreatedWorkerPod: never written
    said = [str(h.kube.get("events", name).get("message")) for name in h.kube.names("events")]
    assert not [m for m in said if "-worker-abcde" in m], said  # no Event names the failed pod
    h.kube.put("nodes", spot_node("boot-2") if after == "booted again" else spot_node("boot-1", ready=False), "")
    h.kube.set_status("rayjobs", run_id, {**FAILED, "message": COLLECTIVE})
    tick(h)
    queued = h.ctx.store.get(run_id)
    assert queued.state == State.QUEUED, queued.reason
    said = "booted again since the run ran there" if after == "booted again" else "not Ready (KubeletNotReady"
    assert f"attempt 1 of 3 lost its nodes: node {SPOT_NODE}: {said}" in queued.reason
    assert queued.nodes == {} and queued.node_ids == {}  # the next attempt's nodes are read afresh
    h.clock.advance(61)
    tick(h)
    assert h.ctx.store.get(run_id).state == State.SUBMITTED and h.kube.get("rayjobs", f"{run_id}-2") is not None


CORDONED = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
SPOT_NOTICE = [{"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}]


@pytest.mark.parametrize("after", ["cordoned", "tainted for termination", "NotReady after the failure", "no boot id"])
def test_a_python_error_whose_node_only_looks_lost_afterwards_ends_in_one_attempt(controller, bucket, after):
    """The job failed with its own error, its pod intact; at the tick after, its node is cordoned, tainted
    `impending-node-termination`, NotReady since after the job's end, or reads no boot id (issue 63): none of these
    took what the run ran, and the run ends FAILED with the error, its attempts untouched."""
    h = controller
    run_id = launch(h, bucket, "own-error").run_id
    h.kube.set_status("rayjobs", run_id, RUNNING)
    used_raycluster(h, run_id)
    tick(h)
    assert h.ctx.store.get(run_id).node_ids == {SPOT_NODE: "3f0c-node-uid/boot-1"}
    ended = h.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
    h.clock.advance(30)
    later = h.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
    seen = {
        "cordoned": spot_node("boot-1", taints=CORDONED),
        "tainted for termination": spot_node("boot-1", taints=SPOT_NOTICE),
        "NotReady after the failure": spot_node("boot-1", ready=False, since=later),
        "no boot id": spot_node(""),
    }[after]
    h.kube.put("nodes", seen, "")
    h.kube.set_status("rayjobs", run_id, {**FAILED, "message": "ValueError: no image in row 3", "endTime": ended})
    tick(h)
    failed = h.ctx.store.get(run_id)
    assert failed.state == State.FAILED and failed.attempts == [], failed.reason
    assert "no image in row 3" in failed.reason and "lost its nodes" not in failed.reason


def test_a_training_failure_on_a_used_raycluster_still_ends_in_one_attempt(controller, bucket):
    h = controller
    run_id = launch(h, bucket, "used-bad-data").run_id
    h.kube.set_status("rayjobs", run_id, RUNNING)
    used_raycluster(h, run_id)
    tick(h)
    h.kube.set_status("rayjobs", run_id, {**FAILED, "message": "ValueError: no image in row 3"})
    tick(h)
    failed = h.ctx.store.get(run_id)
    assert failed.state == State.FAILED and failed.attempts == [] and "no image in row 3" in failed.reason


def test_each_attempt_costs_what_its_nodes_cost(controller, bucket):
    import dataclasses

    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, node_hour_price=90.0)
    record = launch(h, bucket, "spot-priced")
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.clock.advance(1800)
    preempt(h, record.run_id)
    h.kube.set_status("rayjobs", record.run_id, FAILED)
    tick(h)
    h.clock.advance(61)
    tick(h)
    h.clock.advance(1739)
    h.kube.set_status("rayjobs", f"{record.run_id}-2", DONE)
    tick(h)
    done = h.ctx.store.get(record.run_id)
    first, second = done.attempts
    assert (first.cost, second.cost) == (90.0, 90.0)  # 2 nodes x 30 min each, the backoff in the second
    assert done.cost == 180.0


def test_a_training_failure_ends_the_run_in_one_attempt(controller, bucket):
    h = controller
    record = launch(h, bucket, "bad-data")
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.kube.set_status("rayjobs", record.run_id, {**FAILED, "message": "ValueError: no image in row 3"})
    tick(h)
    failed = h.ctx.store.get(record.run_id)
    assert failed.state == State.FAILED and failed.attempts == [] and "no image in row 3" in failed.reason


def test_retry_by_message_starts_the_next_attempt_of_a_failed_run(controller, bucket):
    h = controller
    record = launch(h, bucket, "retried")
    h.kube.set_status("rayjobs", record.run_id, {**FAILED, "message": "ConnectionError: the Hub did not answer"})
    tick(h)
    assert h.ctx.store.get(record.run_id).settled
    watch.handle(message_published({"kind": "retry", "run_id": record.run_id}, "retry-1"), h.ctx)
    retried = h.ctx.store.get(record.run_id)
    assert retried.state == State.SUBMITTED and retried.attempt == 2 and retried.attempts[1].by == "raytune retry"
    assert h.kube.get("rayjobs", f"{record.run_id}-2") is not None and workers(h)["replicas"] == 2
    # a second retry of a run that is live again is refused and changes nothing
    watch.handle(message_published({"kind": "retry", "run_id": record.run_id}, "retry-2"), h.ctx)
    assert h.ctx.store.get(record.run_id).attempt == 2
    # It fails again, in the same state: its end is published and settled at once, not held for the claim of the
    # first attempt's end (which left `raytune retry` refusing "retry shortly" until that claim went stale).
    first = [m for m in h.finished_events() if m["run_id"] == record.run_id]
    assert [m["state"] for m in first] == ["FAILED"]
    h.kube.set_status("rayjobs", f"{record.run_id}-2", {**FAILED, "message": "ConnectionError: again"})
    tick(h)
    again = h.ctx.store.get(record.run_id)
    assert again.state == State.FAILED and again.settled, again.reason
    ends = [m for m in h.finished_events() if m["run_id"] == record.run_id]
    assert [m["state"] for m in ends] == ["FAILED", "FAILED"] and len(ends[1]["attempts"]) == 2
    watch.handle(message_published({"kind": "retry", "run_id": record.run_id}, "retry-3"), h.ctx)
    assert h.ctx.store.get(record.run_id).attempt == 3


def test_a_capacity_list_applies_its_compute_class_before_the_group_that_selects_it(controller, bucket):
    h = controller
    capacity = [{"kind": "flex-start"}, {"kind": "spot"}, {"kind": "on-demand"}]
    config = {**QUICK, "scaling": {**QUICK["scaling"], "capacity": capacity}}
    record = launch(h, bucket, "fallback", config)
    assert h.ctx.store.get(record.run_id).state == State.SUBMITTED
    name = computeclass.class_name(RunConfig.model_validate(config).scaling)
    applied = h.kube.get("computeclasses", name, namespace="")
    assert [bool(p.get("flexStart")) for p in applied["spec"]["priorities"]] == [True, False, False]
    assert applied["metadata"]["labels"][manifests.OWNER_LABEL]
    order = [path for method, path, _ in h.kube.requests if method in ("PATCH", "POST")]
    # The assembly's order (manifests.RunObjects): what the pods mount, the class the group selects, the cluster,
    # then the job.
    plurals = ("secrets", "configmaps", "computeclasses", "rayclusters", "rayjobs")
    kinds = [next(k for k in plurals if f"/{k}" in p) for p in order]
    firsts = sorted(set(kinds), key=kinds.index)
    assert firsts == list(plurals), order
    [group] = [g for g in h.kube.get("rayclusters", "gemma3-tuning")["spec"]["workerGroupSpecs"]]
    assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] == name


def test_the_record_says_which_capacity_each_node_came_from_and_the_cost_prices_each(controller, bucket):
    import dataclasses

    h = controller
    h.ctx.settings = dataclasses.replace(
        h.ctx.settings, node_hour_price=100.0, node_hour_prices={"spot": 30.0, "reservation": 60.0}
    )
    record = launch(h, bucket, "priced")
    for name, labels in (
        ("gke-a4-spot-1", {"cloud.google.com/gke-spot": "true"}),
        ("gke-a4-res-1", {"cloud.google.com/reservation-name": "a4-res"}),
    ):
        h.kube.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}, "")
        h.kube.put(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"w-{name}", "labels": {manifests.RUN_LABEL: record.run_id}},
                "spec": {"nodeName": name},
                "status": {"phase": "Running"},
            },
        )
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    running = h.ctx.store.get(record.run_id)
    assert running.nodes == {"gke-a4-res-1": "reservation a4-res", "gke-a4-spot-1": "spot"}
    reads = h.kube.calls("GET", "/nodes/")
    tick(h)
    assert h.kube.calls("GET", "/nodes/") == reads  # known: not read again on every tick
    h.clock.advance(3600)
    h.kube.set_status("rayjobs", record.run_id, DONE)
    tick(h)
    done = h.ctx.store.get(record.run_id)
    assert done.state == State.SUCCEEDED
    # two node-hours at the mean of the two nodes' prices (spot 30, reservation 60), not the one price (100)
    assert done.cost == round(done.gpu_node_seconds / 3600 * 45.0, 2)
    [finished] = h.finished_events()
    assert finished["nodes"] == running.nodes and finished["cost"] == done.cost
