"""The GPU worker group's promises, with faults and interleavings forced through the Kubernetes fake:
(1) a SUBMITTED/RUNNING run never has fewer workers than it needs, (2) no worker stays up after the last
live run ended, whatever the path to the end, (3) a cancelled run never has a RayJob running afterwards."""

from __future__ import annotations

import time

from functions.core.allocation import group_name
from functions.core.runs import State
from functions.handlers import watch as watch_handler
from functions.handlers.launch import handle as launch_handle
from functions.handlers.watch import request_cancel
from functions.local.cloudevents import message_published, object_finalized
from tests.integration.test_functions import QUICK, only_record, upload, workers

RUNNING = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
DONE = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}


def launch(h, bucket, name, config=QUICK):
    generation = upload(bucket, f"configs/{name}.json", config)
    return launch_handle(object_finalized(bucket, f"configs/{name}.json", generation), h.ctx)


def runs_to_success(h, run_id: str, seconds: float):
    """The run's RayJob running for `seconds` of the clock, then done, each seen by a tick: its record then."""
    h.kube.set_status("rayjobs", run_id, RUNNING)
    tick(h)
    h.clock.advance(seconds)
    h.kube.set_status("rayjobs", run_id, DONE)
    tick(h)
    return h.ctx.store.get(run_id)


def tick(h):
    return watch_handler.handle(message_published({"kind": "tick"}, str(time.time_ns())), h.ctx)


def test_one_401_refreshes_and_never_fails_a_running_run(controller, bucket):
    h = controller
    record = launch(h, bucket, "auth")
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.kube.fail("GET", "/rayjobs", 401, times=1)
    tick(h)
    assert h.refreshes, "credentials were refreshed"
    assert h.ctx.store.get(record.run_id).state == State.RUNNING
    assert workers(h)["replicas"] == 2  # invariant 1


def test_a_failing_status_read_is_retried_next_tick_not_a_failure(controller, bucket):
    h = controller
    record = launch(h, bucket, "flaky-read")
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.kube.fail("GET", "/rayjobs", 403, times=2)  # refreshed and refused again
    try:
        tick(h)
    except Exception:
        pass
    assert h.ctx.store.get(record.run_id).state == State.RUNNING and workers(h)["replicas"] == 2


def test_a_hung_api_call_holds_one_run_not_the_tick(controller, bucket):
    h = controller
    first, second = launch(h, bucket, "hung"), launch(h, bucket, "free")
    for run in (first, second):
        h.kube.set_status("rayjobs", run.run_id, RUNNING)
    # The tick's listing of the RayJobs hangs, and so does the read of the first run's job it falls back to.
    h.kube.hang("GET", "/rayjobs", 30, times=4)
    h.kube.hang("GET", f"/rayjobs/{first.run_id}", 30, times=8)
    started = time.monotonic()
    try:
        tick(h)
    except Exception:
        pass
    assert time.monotonic() - started < 20  # read timeouts (2 s here) x retries, not the 30 s stall
    assert h.ctx.store.get(second.run_id).state == State.RUNNING


def test_a_cancel_during_the_apply_leaves_no_job_running(controller, bucket):
    """The watcher cancels a run whose claim expired while its (slow) launch is applying the RayJob."""
    h = controller
    real_submit = h.ctx.platform.submit

    def slow_submit(cfg, run_id, job, env):
        h.clock.advance(121)  # the claim expires during the apply
        request_cancel(h.ctx, run_id, "cancelled by an operator")
        tick(h)  # the watcher ends the run before the launch writes SUBMITTED
        real_submit(cfg, run_id, job, env)

    h.ctx.platform.submit = slow_submit
    generation = upload(bucket, "configs/race.json", QUICK)
    record = launch_handle(object_finalized(bucket, "configs/race.json", generation), h.ctx)
    assert record.state == State.CANCELLED
    assert h.kube.names("rayjobs") == []  # invariant 3: the launch stopped the job it applied
    assert workers(h)["replicas"] == 0  # invariant 2


def test_a_permanent_failure_after_the_cluster_apply_releases_the_workers(controller, bucket):
    h = controller
    h.kube.fail("PATCH", "/rayjobs/", 422, times=1)
    launch(h, bucket, "rejected-job")
    record = only_record(h)
    assert record.state == State.FAILED and "HTTP 422" in record.reason
    assert workers(h)["replicas"] == 0  # invariant 2: the RayCluster apply had scaled it to 2


def test_a_run_settles_only_after_its_workers_are_released(controller, bucket):
    """The tick releases each RayCluster once after its runs' steps, then settles the runs that ended there: a
    scale-down the API refuses leaves the run ended but unsettled (still watched, no run-finished event), and the
    next tick releases its workers, then publishes its end."""
    h = controller
    run = launch(h, bucket, "release-first")
    h.kube.set_status("rayjobs", run.run_id, DONE)
    h.kube.fail("PATCH", "/rayclusters/", 503, times=50)
    try:
        tick(h)
    except Exception:
        pass  # transient: Pub/Sub delivers the tick again
    ended = h.ctx.store.get(run.run_id)
    assert ended.state == State.SUCCEEDED and not ended.settled and workers(h)["replicas"] == 2
    assert h.events_of("run-finished") == []
    h.kube.faults.clear()
    tick(h)
    assert h.ctx.store.get(run.run_id).settled and workers(h)["replicas"] == 0
    assert [e["run_id"] for e in h.events_of("run-finished")] == [run.run_id] and h.events_of("leak") == []


def test_runs_ending_in_one_tick_leave_no_workers(controller, bucket):
    h = controller
    roomy = {**QUICK, "scaling": {"nodes": 2}, "cluster": {"max_worker_nodes": 8}}
    runs = [launch(h, bucket, f"together-{i}", roomy) for i in range(4)]
    assert workers(h)["replicas"] == 8
    for run in runs:
        h.kube.set_status("rayjobs", run.run_id, DONE)
    tick(h)
    assert all(h.ctx.store.get(r.run_id).state == State.SUCCEEDED for r in runs)
    assert workers(h)["replicas"] == 0


def test_each_run_records_the_gpu_time_it_held_and_its_cost(controller, bucket):
    import dataclasses

    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, node_hour_price=12.5)
    record = launch(h, bucket, "costed")  # 2 nodes x 8 GPUs
    ended = runs_to_success(h, record.run_id, seconds=1800)
    assert ended.state == State.SUCCEEDED
    assert ended.gpu_node_seconds == 3600.0 and ended.cost == 12.5  # 2 nodes for half an hour
    [event] = [e for e in h.finished_events() if e["run_id"] == record.run_id]
    assert event["gpu_node_seconds"] == 3600.0 and event["cost"] == 12.5


def test_concurrent_launches_never_undersize_the_group(controller, bucket):
    """A 1-node and a 4-node launch at once, the first one's reads slowed down: a stale writer loses, and
    the group ends at what both hold (5), never at one run's size."""
    import threading

    h = controller
    h.kube.hang("GET", "/rayclusters/", 0.5, times=2)  # the first reader of the group sees it late
    results = {}

    def go(name, nodes):
        results[name] = launch(h, bucket, name, {**QUICK, "scaling": {"nodes": nodes}})

    threads = [threading.Thread(target=go, args=(f"race-{n}", n)) for n in (1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.state for r in results.values()} == {State.SUBMITTED}
    assert workers(h)["replicas"] == 5  # invariant 1 for both runs
    [alloc] = h.ctx.allocations.all()
    stamp = h.kube.get("rayclusters", "gemma3-tuning")["metadata"]["annotations"]["raytune.dev/allocation"]
    assert alloc.wanted == 5 and int(stamp) == alloc.version


def test_a_stale_scale_down_cannot_shrink_under_a_newer_admission(controller, bucket):
    """The watcher reads the allocation with no live run, then a launch admits a run and sizes the group
    (its apply may change nothing but the stamp): the watcher's write loses."""
    from functions.handlers import sizing

    h = controller
    first = launch(h, bucket, "first")
    h.kube.set_status("rayjobs", first.run_id, DONE)
    real_get = h.ctx.allocations.get
    landed = {}

    def get_then_launch(spec):
        alloc = real_get(spec)
        if not landed and h.ctx.store.get(first.run_id).state.terminal:
            landed["second"] = None
            landed["second"] = launch(h, bucket, "second")  # lands between the watcher's reads
        return alloc

    h.ctx.allocations.get = get_then_launch
    tick(h)
    h.ctx.allocations.get = real_get
    assert landed["second"].state == State.SUBMITTED
    assert workers(h)["replicas"] == 2  # invariant 1 for the second run
    sizing.release(h.ctx, h.ctx.allocations.all()[0].cluster)  # idempotent
    assert workers(h)["replicas"] == 2


def test_runs_that_do_not_fit_wait_in_a_visible_queue(controller, bucket):
    """Three 2-node runs on a 5-node RayCluster: the third waits QUEUED (position 1, in its record and a
    run-state event) and is submitted in the tick that frees the nodes."""
    h = controller
    runs = [launch(h, bucket, f"q-{i}") for i in range(3)]
    assert [r.state for r in runs] == [State.SUBMITTED, State.SUBMITTED, State.QUEUED]
    queued = h.ctx.store.get(runs[2].run_id)
    assert queued.queue_position == 1 and "queued 1 of 1: needs 2 worker nodes, 4 of 5" in queued.reason
    [state_event] = h.events_of("run-state")
    assert state_event["run_id"] == runs[2].run_id and state_event["queue_position"] == 1
    assert workers(h)["replicas"] == 4
    tick(h)
    assert h.ctx.store.get(runs[2].run_id).state == State.QUEUED  # nothing ended: still waiting
    h.kube.set_status("rayjobs", runs[0].run_id, DONE)
    tick(h)
    assert h.ctx.store.get(runs[0].run_id).state == State.SUCCEEDED
    dequeued = h.ctx.store.get(runs[2].run_id)
    assert dequeued.state == State.SUBMITTED and dequeued.queue_position is None
    assert workers(h)["replicas"] == 4  # 2 released, 2 admitted
    assert h.kube.get("rayjobs", runs[2].run_id) is not None


def test_the_queue_deadline_counts_from_arrival(controller, bucket):
    h = controller
    big = {**QUICK, "scaling": {"nodes": 4}, "deadlines": {"pending_seconds": 600, "queue_seconds": 900}}
    launch(h, bucket, "holder", big)
    waiting = launch(h, bucket, "waiter", big)
    assert waiting.state == State.QUEUED
    h.clock.advance(901)
    h.kube.set_status("rayjobs", only_live_submitted(h), RUNNING)
    tick(h)
    ended = h.ctx.store.get(waiting.run_id)
    assert ended.state == State.FAILED and "still queued (position 1) after 901s" in ended.reason
    [event] = [e for e in h.finished_events() if e["run_id"] == waiting.run_id]
    assert event["queue_position"] == 1
    assert h.ctx.allocations.all()[0].queue == []  # its place is released


def only_live_submitted(h):
    [run_id] = [r.run_id for r in h.ctx.store.active() if r.state == State.SUBMITTED]
    return run_id


def test_an_idle_raycluster_is_deleted_and_recreated_by_the_next_launch(controller, bucket):
    h = controller
    quick = {**QUICK, "cluster": {"idle_delete_seconds": 600}}
    record = launch(h, bucket, "idle", quick)
    h.kube.set_status("rayjobs", record.run_id, DONE)
    tick(h)
    assert workers(h)["replicas"] == 0 and h.kube.names("rayclusters") == ["gemma3-tuning"]
    h.clock.advance(599)
    tick(h)
    assert h.kube.names("rayclusters") == ["gemma3-tuning"]
    h.clock.advance(2)
    tick(h)
    assert h.kube.names("rayclusters") == []  # its head pod no longer bills
    again = launch(h, bucket, "after-idle", quick)
    assert again.state == State.SUBMITTED and workers(h)["replicas"] == 2


def idle_past_its_deadline(h, bucket, name):
    """A RayCluster whose only run ended more than its cluster.idle_delete_seconds (60) ago; its config."""
    quick = {**QUICK, "cluster": {"idle_delete_seconds": 60}}
    record = launch(h, bucket, name, quick)
    h.kube.set_status("rayjobs", record.run_id, DONE)
    tick(h)
    h.clock.advance(61)
    return quick


def test_an_idle_teardown_loses_to_a_launch_that_sized_the_cluster(controller, bucket):
    """The watcher decides to delete the idle RayCluster; a launch sizes it before the delete lands:
    the delete's resourceVersion precondition fails and the run keeps its cluster."""
    h = controller
    quick = idle_past_its_deadline(h, bucket, "idle-race")
    real_delete = h.ctx.platform.delete_cluster
    landed = {}

    def launch_then_delete(spec, workers_read):
        landed["run"] = launch(h, bucket, "sneaks-in", quick)
        return real_delete(spec, workers_read)

    h.ctx.platform.delete_cluster = launch_then_delete
    tick(h)
    assert landed["run"].state == State.SUBMITTED
    assert h.kube.names("rayclusters") == ["gemma3-tuning"] and workers(h)["replicas"] == 2


def test_leaked_rayjobs_and_rayclusters_are_swept_and_reported(controller, bucket):
    from functions.core import manifests
    from functions.core.config import RunConfig

    h = controller
    live = launch(h, bucket, "live")
    cfg = RunConfig.model_validate(live.config)
    owner = h.ctx.platform.owner
    leaked_job = manifests.ray_job(cfg, "ghost-0123456789", "h" * 64, {}, owner=owner)
    h.kube.put("rayjobs", leaked_job)
    other = manifests.ray_cluster(in_cluster(cfg, "forgotten"), [], "h" * 64, [group(cfg, 3)], owner=owner)
    h.kube.put("rayclusters", other)
    h.kube.set_status("rayjobs", live.run_id, RUNNING)
    tick(h)
    assert h.kube.names("rayclusters") == ["forgotten", "gemma3-tuning"], "younger than the grace period: left"
    h.clock.advance(h.ctx.settings.sweep_grace_s)
    tick(h)
    assert h.kube.names("rayjobs") == [live.run_id]  # the live run's job is untouched
    assert h.kube.names("rayclusters") == ["gemma3-tuning"]
    leaks = h.events_of("leak")
    assert {e["reason"].split(":")[0] for e in leaks} == {
        "RayJob default/ghost-0123456789 stopped",
        "RayCluster default/forgotten deleted",
    }


def group(cfg, replicas: int) -> dict:
    from functions.core import manifests

    return manifests.worker_group(cfg, "someone-0123456789", replicas, [], "h" * 64)


def in_cluster(cfg, ray_cluster: str):
    return cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"ray_cluster": ray_cluster})})


def test_another_deployments_objects_in_the_same_namespace_are_never_swept(controller, bucket):
    """Issue 21: the sweep selected by managed-by=raytune alone, so a second deployment (another runs bucket) in
    the same namespace lost its RayCluster and its RUNNING RayJob. Objects carry their deployment now."""
    from functions.core import manifests
    from functions.core.config import RunConfig

    h = controller
    live = launch(h, bucket, "live")
    cfg = RunConfig.model_validate(live.config)
    theirs = manifests.owner_id("another-teams-runs-bucket")
    h.kube.put("rayjobs", manifests.ray_job(cfg, "theirs-0123456789", "h" * 64, {}, owner=theirs))
    h.kube.set_status("rayjobs", "theirs-0123456789", RUNNING)
    theirs_cluster = manifests.ray_cluster(
        in_cluster(cfg, "their-cluster"), [], "h" * 64, [group(cfg, 2)], owner=theirs
    )
    h.kube.put("rayclusters", theirs_cluster)
    h.kube.set_status("rayjobs", live.run_id, RUNNING)
    h.clock.advance(h.ctx.settings.sweep_grace_s + 1)
    tick(h)
    tick(h)
    assert h.kube.names("rayjobs") == sorted([live.run_id, "theirs-0123456789"])
    assert h.kube.names("rayclusters") == ["gemma3-tuning", "their-cluster"]
    assert h.kube.get("rayclusters", "their-cluster")["spec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert h.events_of("leak") == []
    ours = h.kube.get("rayjobs", live.run_id)["metadata"]["labels"]
    assert ours[manifests.OWNER_LABEL] == manifests.owner_id(bucket)


def test_a_raycluster_a_launch_creates_during_the_tick_is_not_swept(controller, bucket):
    """Issue 21: the tick listed allocations once at its start, so a RayCluster a launch created meanwhile was
    deleted by that tick's sweep while its run was SUBMITTED. Each delete re-checks fresh state (and young
    objects have a grace period, off here to show the re-check alone holds)."""
    import dataclasses

    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, sweep_grace_s=0)
    launch(h, bucket, "first")
    real_listing = h.ctx.platform.ray_objects
    landed = {}

    def launch_then_list(spec):
        if "run" not in landed:
            landed["run"] = launch(h, bucket, "newcomer", {**QUICK, "cluster": {"ray_cluster": "newcomer-cluster"}})
        return real_listing(spec)

    h.ctx.platform.ray_objects = launch_then_list
    tick(h)
    assert landed["run"].state == State.SUBMITTED
    assert "newcomer-cluster" in h.kube.names("rayclusters") and h.events_of("leak") == []


def pulling(name: str, labels: dict[str, str], image: str, reason: str, message: str) -> dict:
    """A Ray worker pod whose image does not come, as the kubelet reports it."""
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "ray-worker", "image": image}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "ray-worker", "image": image, "state": {"waiting": {"reason": reason, "message": message}}}
            ],
        },
    }


def test_a_stuck_job_names_its_cause(controller, bucket):
    """A job waiting on a pod that cannot pull its image says so in the record, and the FAILED reason at
    the pending deadline names it; another run's pods on the same RayCluster are its own business (issue 63)."""
    h = controller
    record = launch(h, bucket, "stuck")
    h.kube.set_status("rayjobs", record.run_id, {"jobDeploymentStatus": "Initializing"})
    # KubeRay's labels on a worker pod: its RayCluster, its node type and its group (the run's own)
    own = {"ray.io/cluster": "gemma3-tuning", "ray.io/node-type": "worker", "ray.io/group": group_name(record.run_id)}
    others = {**own, "ray.io/group": group_name("another-run")}
    h.kube.put(
        "pods", pulling("gemma3-tuning-other-worker-xyz", others, "example.com/other:1", "ErrImagePull", "not found")
    )
    h.kube.put(
        "pods",
        pulling(
            "gemma3-tuning-gpu-group-worker-abc",
            own,
            "rayproject/ray:2.60.0-py311-gpu",
            "ImagePullBackOff",
            "Back-off pulling image",
        ),
    )
    h.kube.put(
        "pods",
        {
            "metadata": {"name": "gemma3-tuning-gpu-group-worker-def", "labels": own},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        },
    )
    h.kube.put(
        "events",
        {
            "metadata": {"name": "worker-def.1"},
            "involvedObject": {"kind": "Pod", "name": "gemma3-tuning-gpu-group-worker-def"},
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        },
    )
    tick(h)
    waiting = h.ctx.store.get(record.run_id)
    assert waiting.state == State.SUBMITTED
    assert "ImagePullBackOff for image rayproject/ray:2.60.0-py311-gpu" in waiting.reason
    assert "FailedScheduling: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu." in waiting.reason
    assert "other-worker" not in waiting.reason and "ErrImagePull" not in waiting.reason
    h.clock.advance(601)
    tick(h)
    failed = h.ctx.store.get(record.run_id)
    assert failed.state == State.FAILED and "still Initializing after" in failed.reason
    assert "ImagePullBackOff" in failed.reason


def test_an_idle_teardown_survives_kuberay_status_writes(controller, bucket):
    """KubeRay's status writes move the RayCluster's resourceVersion between the watcher's read and its
    delete: the delete is tried again on a fresh read instead of being forgotten."""
    h = controller
    idle_past_its_deadline(h, bucket, "churn")
    real_delete = h.ctx.platform.delete_cluster
    writes = {"n": 0}

    def status_write_then_delete(spec, workers_read):
        if writes["n"] < 2:
            writes["n"] += 1
            h.kube.set_status("rayclusters", "gemma3-tuning", {"state": "ready", "readyWorkerReplicas": 0})
        return real_delete(spec, workers_read)

    h.ctx.platform.delete_cluster = status_write_then_delete
    tick(h)
    assert h.kube.names("rayclusters") == []


def test_an_idle_teardown_that_cannot_land_is_tried_again_next_tick(controller, bucket):
    h = controller
    idle_past_its_deadline(h, bucket, "stubborn")
    h.kube.fail("DELETE", "/rayclusters/", 409, times=3)  # three conflicts in a row: this tick gives up
    tick(h)
    assert h.kube.names("rayclusters") == ["gemma3-tuning"] and not h.ctx.allocations.all()[0].deleted
    tick(h)
    assert h.kube.names("rayclusters") == []


def test_kuberays_first_status_writes_do_not_undersize_or_strand_a_new_raycluster(controller, bucket):
    """The fake plays what the real operator does to a new RayCluster (tests/contract/test_realkube.py): its
    first writes find the resourceVersion moved by status writes. Conditional sizing and the idle delete
    still land, on a fresh read, and the group is never wrong."""
    h = controller
    h.kube.status_churn = 3
    quick = {**QUICK, "cluster": {"idle_delete_seconds": 60}}
    first = launch(h, bucket, "churn-a", {**quick, "scaling": {"nodes": 1}})
    second = launch(h, bucket, "churn-b", {**quick, "scaling": {"nodes": 2}})
    assert {first.state, second.state} == {State.SUBMITTED} and workers(h)["replicas"] == 3
    assert h.kube.get("rayclusters", "gemma3-tuning")["status"]["state"] == "ready"
    h.kube.set_status("rayjobs", first.run_id, DONE)
    h.kube.set_status("rayjobs", second.run_id, DONE)
    tick(h)
    assert workers(h)["replicas"] == 0
    h.clock.advance(61)
    tick(h)
    assert h.kube.names("rayclusters") == []
