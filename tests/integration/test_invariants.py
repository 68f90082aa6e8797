"""The GPU worker group's promises, with faults and interleavings forced through the Kubernetes fake:
(1) a SUBMITTED/RUNNING run never has fewer workers than it needs, (2) no worker stays up after the last
live run ended, whatever the path to the end, (3) a cancelled run never has a RayJob running afterwards."""

from __future__ import annotations

import time

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


def tick(h):
    return watch_handler.handle(message_published({"kind": "tick"}, str(time.time_ns())), h.ctx)


def test_one_401_refreshes_and_never_fails_a_running_run(controller, bucket):
    h = controller
    record = launch(h, bucket, "auth")
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.kube.fail("GET", "/rayjobs/", 401, times=1)
    tick(h)
    assert h.refreshes, "credentials were refreshed"
    assert h.ctx.store.get(record.run_id).state == State.RUNNING
    assert workers(h)["replicas"] == 2  # invariant 1


def test_a_failing_status_read_is_retried_next_tick_not_a_failure(controller, bucket):
    h = controller
    record = launch(h, bucket, "flaky-read")
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.kube.fail("GET", "/rayjobs/", 403, times=2)  # refreshed and refused again
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

    def slow_submit(cfg, run_id, replicas, env):
        h.clock.advance(121)  # the claim expires during the apply
        request_cancel(h.ctx, run_id, "cancelled by an operator")
        tick(h)  # the watcher ends the run before the launch writes SUBMITTED
        real_submit(cfg, run_id, replicas, env)

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


def test_runs_ending_in_one_tick_leave_no_workers(controller, bucket):
    h = controller
    runs = [launch(h, bucket, f"together-{i}") for i in range(4)]
    assert workers(h)["replicas"] == 2
    for run in runs:
        h.kube.set_status("rayjobs", run.run_id, DONE)
    tick(h)
    assert all(h.ctx.store.get(r.run_id).state == State.SUCCEEDED for r in runs)
    assert workers(h)["replicas"] == 0 and workers(h)["minReplicas"] == 0


def test_each_run_records_the_gpu_time_it_held_and_its_cost(controller, bucket):
    import dataclasses

    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, node_hour_price=12.5)
    record = launch(h, bucket, "costed")  # 2 nodes x 8 GPUs
    h.kube.set_status("rayjobs", record.run_id, RUNNING)
    tick(h)
    h.clock.advance(1800)
    h.kube.set_status("rayjobs", record.run_id, DONE)
    tick(h)
    ended = h.ctx.store.get(record.run_id)
    assert ended.state == State.SUCCEEDED
    assert ended.gpu_node_seconds == 3600.0 and ended.cost == 12.5  # 2 nodes for half an hour
    [event] = [e for e in h.finished_events() if e["run_id"] == record.run_id]
    assert event["gpu_node_seconds"] == 3600.0 and event["cost"] == 12.5
