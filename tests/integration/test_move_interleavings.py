"""A run that may move between regions, against every interleaving of what can happen to it (issue 63): its bound
passing (a move), a cancel, its job succeeding or failing where it is, the next region's API answering 403, 404 or
500, the operator removing a region from the policy, and a second watcher with a memory of its own ticking with
the first. After any tick, no region holds a worker group, an allocation hold or a RayJob for a run that is not live
there, and the run's deadline holds whatever a region's API does. Played on the bucket emulator with a Kubernetes
API server per region (the real control plane plays the move and the 403 in tests/contract/test_realkube_regions.py).
"""

from __future__ import annotations

import dataclasses
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.adapters.gcs import Bucket
from functions.adapters.store import RunStore
from functions.core.allocation import group_name
from functions.core.decide import Facts, JobSeen
from functions.core.runs import State
from functions.handlers import steps
from functions.handlers import watch as watcher
from functions.handlers.context import Context
from tests.fakes.http_events import post, storage_event
from tests.harness import REGIONS, serve_functions
from tests.integration.test_functions import QUICK, upload
from tests.integration.test_version_skew import SUCCEEDED

MOVABLE = {
    **QUICK,
    "name": "mover",
    "scaling": {"nodes": 1},
    "cluster": {"region": REGIONS[0], "fallback_regions": [REGIONS[1]]},
    "deadlines": {"pending_seconds": 1200, "region_seconds": 300},
}
FAILED = {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "message": "Traceback: ValueError: bad batch"}
RUNNING = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
ENDED = {"SUCCEEDED", "FAILED", "STOPPED"}
METHODS = ("GET", "POST", "PATCH", "DELETE")
EVENTS = st.lists(
    st.sampled_from(
        [
            "tick",
            "tick",
            "second watcher ticks",
            "bound passes",
            "cancel",
            "job runs",
            "job succeeds",
            "job fails",
            "next region answers 403",
            "next region answers 404",
            "next region answers 500",
            "operator removes the next region",
            "pending deadline passes",
        ]
    ),
    min_size=3,
    max_size=9,
)


def second_watcher(ctx: Context) -> Context:
    """Another instance: the same bucket and platform stand-ins, its own memory of records and markers."""
    return dataclasses.replace(ctx, store=RunStore(Bucket(ctx.settings.bucket)))


def holds(h, run_id: str) -> dict[str, set[str]]:
    """What each region holds for the run: its worker group with nodes, its allocation hold or queue place, a
    RayJob of it."""
    found: dict[str, set[str]] = {region: set() for region in REGIONS}
    for region, kube in h.kubes.items():
        cluster = kube.get("rayclusters", "gemma3-tuning") or {}
        groups = cluster.get("spec", {}).get("workerGroupSpecs") or []
        if any(g["groupName"] == group_name(run_id) and g["replicas"] for g in groups):
            found[region].add("group")
        jobs = [kube.get("rayjobs", name) for name in kube.names("rayjobs") if name.startswith(run_id)]
        if any((job or {}).get("status", {}).get("jobStatus") not in ENDED for job in jobs):
            found[region].add("job")  # a job not ended: KubeRay may still start it
    for name in h.ctx.store.blobs.list("clusters/"):
        alloc = json.loads(h.ctx.store.blobs.read(name)[0])
        region = alloc["cluster"]["region"]
        if run_id in alloc.get("holders", {}) or any(w["run_id"] == run_id for w in alloc.get("queue", [])):
            found[region].add("hold")
    return found


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_no_region_holds_anything_for_a_run_not_live_there(regional, bucket, events):
    h = regional
    for kube in h.kubes.values():
        kube.faults.clear()
        kube.objects.clear()
    for name in h.ctx.store.blobs.list(""):
        h.ctx.store.blobs.delete(name)
    h.ctx.settings = dataclasses.replace(
        h.ctx.settings, policy=h.ctx.settings.policy.model_copy(update={"regions": ()})
    )
    second = second_watcher(h.ctx)
    name = f"configs/mover-{len(events)}.json"
    with serve_functions() as urls:
        post(urls["launch"], storage_event(bucket, name, upload(bucket, name, MOVABLE), when=h.clock()))
    [run_id] = [n.removeprefix("runs/active/") for n in h.ctx.store.blobs.list("runs/active/")]
    started = h.clock()
    for event in events:
        record = h.ctx.store.get(run_id)
        here, there = record.region, REGIONS[1] if record.region == REGIONS[0] else REGIONS[0]
        if event in ("tick", "second watcher ticks"):
            try:
                watcher.reconcile_all(h.ctx if event == "tick" else second)
            except Exception:  # a transient error asks Pub/Sub for the tick again: the next tick is that
                pass
            check(h, run_id, started)
        elif event == "bound passes":
            h.clock.advance(301)
        elif event == "pending deadline passes":
            h.clock.advance(1201)
        elif event == "cancel":
            watcher.request_cancel(h.ctx, run_id, "cancelled by the property")
        elif event in ("job runs", "job succeeds", "job fails") and h.kubes[here].get("rayjobs", record.job_name):
            status = {"job runs": RUNNING, "job succeeds": SUCCEEDED, "job fails": FAILED}[event]
            h.kubes[here].set_status("rayjobs", record.job_name, status)
        elif event.startswith("next region answers"):
            for method in METHODS:
                h.kubes[there].fail(method, "/", int(event.rsplit(" ", 1)[1]), times=4)
        elif event == "operator removes the next region":
            policy = h.ctx.settings.policy.model_copy(update={"regions": (here,)})
            h.ctx.settings = dataclasses.replace(h.ctx.settings, policy=policy)
            second.settings = h.ctx.settings
    # Whatever happened, once the APIs answer again the ticks bring every region to what the run holds live.
    for kube in h.kubes.values():
        kube.faults.clear()
    for _ in range(4):  # a running job ends; a waiting run passes its bound, then its pending deadline
        record = h.ctx.store.get(run_id)
        running = h.kubes[record.region].get("rayjobs", record.job_name)
        if running is not None and running.get("status", {}).get("jobStatus") == "RUNNING":
            h.kubes[record.region].set_status("rayjobs", record.job_name, SUCCEEDED)
        h.clock.advance(1201)
        try:
            watcher.reconcile_all(h.ctx)
        except Exception:
            pass
    check(h, run_id, started)
    ended = h.ctx.store.get(run_id)
    assert ended.state.terminal and ended.settled, "it ended, at its deadline at the latest, and settled"


def check(h, run_id: str, started) -> None:
    """No region holds anything for the run unless it is live there; faulted regions are judged once they answer."""
    record = h.ctx.store.get(run_id)
    live = not record.state.terminal
    for region, held in holds(h, run_id).items():
        if any(fault[3] > 0 for fault in h.kubes[region].faults):
            held -= {"group", "job"}  # its API does not answer: nothing can be taken back there yet
        if not live or region != record.region:
            assert not held, (region, held, record.state, record.region, record.reason)
    if live:
        waited = (h.clock() - started).total_seconds()
        # the pending deadline (1200 s) per region it waited in, the queue's and a tick's slack on top
        assert waited <= 2 * 1200 + 1201 + 60 or record.state in (State.RUNNING,), (waited, record.state)


def launched_waiting(h, bucket, name: str):
    """A run that may move, submitted in its first region, whose job waits there past its bound."""
    with serve_functions() as urls:
        path = f"configs/{name}.json"
        post(urls["launch"], storage_event(bucket, path, upload(bucket, path, MOVABLE), when=h.clock()))
    [run_id] = [n.removeprefix("runs/active/") for n in h.ctx.store.blobs.list("runs/active/")]
    record = h.ctx.store.get(run_id)
    assert record.state == State.SUBMITTED and record.region == REGIONS[0]
    h.clock.advance(301)
    return record


def test_a_second_watchers_stale_copy_never_moves_a_run_twice(regional, bucket):
    """Watcher B decided the move from its copy of the record; watcher A applied it first (and the run was submitted
    in the next region). B's write is on the record it decided from: refused, and B decides again on the stored one."""
    h = regional
    stale = launched_waiting(h, bucket, "stale")
    watcher.reconcile_all(h.ctx)  # watcher A: moved and submitted in europe-west4
    moved = h.ctx.store.get(stale.run_id)
    assert (moved.state, moved.region, len(moved.placements)) == (State.SUBMITTED, REGIONS[1], 2)
    waiting = {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"}
    second = second_watcher(h.ctx)
    facts = Facts(now=h.clock(), job=JobSeen(waiting), job_stopped=True)  # what B saw, and its stop
    after = steps.run(second, stale, facts)
    assert (after.state, after.region, after.placements) == (State.SUBMITTED, REGIONS[1], moved.placements)
    assert [t.state for t in after.history].count(State.QUEUED) == 1, "one move, one QUEUED"
    assert h.kubes[REGIONS[1]].get("rayjobs", moved.job_name) is not None, "its job there is kept"


def test_a_job_that_started_as_it_was_to_be_stopped_for_a_move_is_kept(regional, bucket):
    """The tick listed the job waiting; it started before the stop: the stop reads it again and refuses, the run
    stays and runs where it is. A worker pod bound to a node keeps the run where it is too."""
    h = regional
    record = launched_waiting(h, bucket, "started")
    kube = h.kubes[REGIONS[0]]
    kube.set_status("rayjobs", record.job_name, RUNNING)  # after the tick's listing
    listed = {record.job_name: {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"}}
    after = steps.run(h.ctx, record, Facts(now=h.clock()), listed)
    assert (after.state, after.region) == (State.RUNNING, REGIONS[0]) and not after.placements
    assert kube.get("rayjobs", record.job_name) is not None

    kube.set_status("rayjobs", record.job_name, {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"})
    group = group_name(record.run_id)
    labels = {"ray.io/cluster": "gemma3-tuning", "ray.io/node-type": "worker", "ray.io/group": group}
    kube.put("pods", {"metadata": {"name": f"{group}-worker-a", "labels": labels}, "spec": {"nodeName": "gke-a4-1"}})
    assert h.ctx.platform.stop_waiting(record.run_config().cluster, record.job_name, record.run_id) == (
        "a worker pod of its run is bound to a node now"
    )
    assert kube.get("rayjobs", record.job_name) is not None


def test_a_rayjob_is_deleted_only_as_it_was_read(regional, bucket):
    h = regional
    record = launched_waiting(h, bucket, "read")
    kube_adapter = h.ctx.platform._kube(record.run_config().cluster)
    assert kube_adapter.delete_rayjob("default", record.job_name, resource_version="1") is False
    assert h.kubes[REGIONS[0]].get("rayjobs", record.job_name) is not None
    version = h.kubes[REGIONS[0]].get("rayjobs", record.job_name)["metadata"]["resourceVersion"]
    assert kube_adapter.delete_rayjob("default", record.job_name, resource_version=version) is True
    assert h.kubes[REGIONS[0]].get("rayjobs", record.job_name) is None
