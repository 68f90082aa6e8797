"""Runs go where the GPUs are (issue 55), on two real control planes: each region's GKE cluster is its own
kube-apiserver with its own real KubeRay operator (tests/realkube/). In us-central1 no GPU node can be made (the
node player's fake Autopilot has no capacity for the accelerator), in europe-west4 it can. A run listing both moves
after its wait in one region, and the first region's RayJob and worker group of that run go, exactly: another run
waiting there and a run already running in europe-west4 keep theirs."""

from __future__ import annotations

import uuid

import pytest

from functions.core.policy import Policy
from functions.core.runs import State
from tests.contract.test_realkube import Real, eventually, running_workers
from tests.harness import PROJECT
from tests.realkube.control_plane import ControlPlane, binaries

FIRST, SECOND = "us-central1", "europe-west4"
WAIT_S = 30  # deadlines.region_seconds here: the controller's clock is advanced past it, nothing sleeps
ACCELERATOR = "cloud.google.com/gke-accelerator"


@pytest.fixture(scope="module")
def starved_plane():
    """A second control plane (kube-apiserver, etcd, controller-manager, KubeRay) whose fake Autopilot makes no GPU
    node: the region without capacity. About 15 s to start; stopped with the module."""
    found = binaries()
    if found is None:
        pytest.skip("the real Kubernetes tier needs RAYTUNE_REALKUBE (see tests/contract/conftest.py)")
    plane = ControlPlane(found).start(kubelet_args=("--no-capacity-for", ACCELERATOR))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def regions(control_plane, starved_plane, bucket, pubsub):
    """The controller over HTTP with each region's cluster on its own control plane: {region: Real}."""
    from functions.handlers import context
    from tests.harness import build_controller, serve_functions

    planes = {FIRST: starved_plane, SECOND: control_plane}
    namespace = f"rk-{uuid.uuid4().hex[:8]}"
    for plane in planes.values():
        plane.kubectl("create", "namespace", namespace)
    harness = build_controller(
        bucket,
        pubsub,
        lambda cluster: planes[cluster.location].kube(),
        policy=Policy(namespaces=("rk-*",), regions=(FIRST, SECOND)),
    )
    harness.gke.add_running(f"projects/{PROJECT}/locations/{SECOND}/clusters/raytune")
    try:
        with serve_functions() as urls:
            yield {region: Real(plane, harness, urls, bucket, namespace) for region, plane in planes.items()}
    finally:
        context.use(None)
        for plane in planes.values():
            plane.kubectl("delete", "namespace", namespace, "--wait=false")


def groups(real: Real) -> dict[str, int]:
    cluster = real.raycluster()
    return {g["groupName"]: g["replicas"] for g in cluster["spec"]["workerGroupSpecs"]} if cluster else {}


def test_a_run_without_capacity_moves_and_nothing_of_another_run_is_touched(regions):
    first, second = regions[FIRST], regions[SECOND]
    gpu = {"nodes": 1, "gpus_per_node": 8}
    # Running in europe-west4 already: it got capacity there and stays.
    staying = second.launch("staying", second.config("staying", scaling=gpu, cluster={"region": SECOND}))
    running_workers(second, 1)
    second.end_job(staying, "RUNNING")
    assert second.until_state(staying, State.RUNNING) == State.RUNNING
    # Waiting in us-central1 with nowhere else to go: it waits on (its pending deadline is an hour).
    waiting = first.launch("waiting", first.config("waiting", scaling=gpu, cluster={"region": FIRST}))
    moving = first.launch(
        "moving",
        first.config(
            "moving",
            scaling=gpu,
            cluster={"region": FIRST, "fallback_regions": [SECOND]},
            deadlines={"region_seconds": WAIT_S},
        ),
    )
    assert {first.state(waiting), first.state(moving)} == {State.SUBMITTED}
    assert first.rayjobs() == sorted([waiting, moving])
    before_first, before_second = groups(first), groups(second)
    assert len(before_first) == 2 and set(before_first.values()) == {1}
    # Its pods stay Pending in us-central1: the fake Autopilot says it cannot scale up, in GKE's words.
    eventually(
        lambda: (
            first.pods("ray.io/node-type=worker")
            and all(p.status.phase == "Pending" for p in first.pods("ray.io/node-type=worker"))
        ),
        "the workers Pending in us-central1",
        60,
    )
    first.tick()
    assert first.state(moving) == State.SUBMITTED, "within its wait it stays"
    first.h.clock.advance(WAIT_S + 1)
    first.tick()
    record = first.h.ctx.store.get(moving)
    assert record.state in (State.SUBMITTED, State.RUNNING) and record.region == SECOND, record.reason
    left, now = record.placements
    assert (left.region, now.region) == (FIRST, SECOND) and left.why.startswith(f"waited {WAIT_S + 1}s for capacity")
    assert "FailedScheduling" in left.why or "NotTriggerScaleUp" in left.why, left.why  # what GKE said
    # us-central1: its RayJob and its group are gone; the waiting run's are as they were.
    eventually(lambda: first.rayjobs() == [waiting], "only the waiting run's RayJob left in us-central1", 60)
    after_first = groups(first)
    moved_group = (set(before_first) - set(after_first)) or {g for g, n in after_first.items() if n == 0}
    assert len(moved_group) == 1 and all(after_first[g] == before_first[g] for g in after_first if g not in moved_group)
    assert first.state(waiting) == State.SUBMITTED
    # europe-west4: the moved run's group added beside the staying run's, which is untouched.
    after_second = groups(second)
    assert {g: n for g, n in after_second.items() if g in before_second} == before_second
    assert sorted(second.rayjobs()) == sorted([staying, moving])
    running_workers(second, 2)
    second.succeed([staying, moving])
    assert second.h.ctx.store.get(moving).placements[-1].region == SECOND
    [ended] = [m for m in second.h.finished_events() if m["run_id"] == moving]
    assert ended["region"] == SECOND and [p["region"] for p in ended["placements"]] == [FIRST, SECOND]
    [stayed] = [m for m in second.h.finished_events() if m["run_id"] == staying]
    assert stayed["region"] == SECOND and stayed["placements"] is None
    first.tick({"kind": "cancel", "run_id": waiting})
    assert first.state(waiting) == State.CANCELLED
    eventually(lambda: first.rayjobs() == [], "the waiting run's RayJob stopped", 60)
