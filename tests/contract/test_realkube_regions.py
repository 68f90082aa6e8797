"""Runs go where the GPUs are (issue 55), on two real control planes: each region's GKE cluster is its own
kube-apiserver with its own real KubeRay operator (tests/realkube/). In us-central1 no GPU node can be made (the
node player's fake Autopilot has no capacity for the accelerator), in europe-west4 it can. A run listing both moves
after its wait in one region, and the first region's RayJob and worker group of that run go, exactly: another run
waiting there and a run already running in europe-west4 keep theirs."""

from __future__ import annotations

from functions.core.allocation import group_name
from functions.core.runs import State
from tests.contract.conftest import FIRST, SECOND
from tests.contract.test_realkube import Real, eventually, running_workers

WAIT_S = 30  # deadlines.region_seconds here: the controller's clock is advanced past it, nothing sleeps


def groups(real: Real) -> dict[str, int]:
    cluster = real.raycluster()
    return {g["groupName"]: g["replicas"] for g in cluster["spec"]["workerGroupSpecs"]} if cluster else {}


def told_no_capacity(real: Real) -> bool:
    """Every worker pod Pending, and the scheduler's and autoscaler's Events on each."""
    workers = real.pods("ray.io/node-type=worker")
    if not workers or any(p.status.phase != "Pending" for p in workers):
        return False
    for pod in workers:
        events = real.core.list_namespaced_event(
            real.namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
        )
        if not {"FailedScheduling", "NotTriggerScaleUp"} <= {e.reason for e in events.items}:
            return False
    return True


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
    # Its pods stay Pending in us-central1: the fake Autopilot says it cannot scale up, in GKE's words. Waited
    # for until the words are there (the node player writes them on its own loop, after the pods appear).
    eventually(lambda: told_no_capacity(first), "the workers Pending in us-central1, with GKE's reason", 60)
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


def test_on_a_new_raycluster_one_runs_wait_for_capacity_never_holds_anothers_start(regions):
    """KubeRay submits a clusterSelector RayJob only once its RayCluster has been `ready`, and a new RayCluster is
    ready only when every group's pods run: the first run waits for GPU capacity that is not there, the second's
    (CPU) node comes. The watcher holds the waiting group at zero until KubeRay calls the RayCluster ready, then sizes
    it again: the second run starts and succeeds, the first waits on, each run's reason naming its own pods only."""
    first = regions[FIRST]
    waits = first.launch("waits", first.config("waits", scaling={"nodes": 1, "gpus_per_node": 8}))
    has = first.launch("has-its-node", first.config("has-its-node", scaling={"nodes": 1, "gpus_per_node": 0}))
    eventually(
        lambda: any(p.status.phase == "Running" for p in first.pods(f"ray.io/group={group_name(has)}")),
        "the second run's worker running",
        90,
    )
    first.end_job(has, "RUNNING")  # submitted: KubeRay's submitter reached the head (the watcher ticks meanwhile)
    assert first.until_state(has, State.RUNNING) == State.RUNNING
    first.succeed([has])
    eventually(lambda: groups(first).get(group_name(waits)) == 1, "the waiting run's group sized again", 60)
    assert first.raycluster()["status"]["state"] == "ready"
    first.tick()
    waiting = first.h.ctx.store.get(waits)
    assert waiting.state == State.SUBMITTED
    assert group_name(has) not in (waiting.reason or ""), waiting.reason


def test_a_run_that_moves_into_a_region_refusing_it_releases_the_region_it_left(regions):
    """The next region has no namespace for the run (its API answers 404): the run moves and fails in the same
    tick, and the region it left keeps no worker group, allocation hold or RayJob for it."""
    first, second = regions[FIRST], regions[SECOND]
    second.plane.kubectl("delete", "namespace", second.namespace, "--wait=true")
    moving = first.launch(
        "refused",
        first.config(
            "refused",
            scaling={"nodes": 1, "gpus_per_node": 8},
            cluster={"region": FIRST, "fallback_regions": [SECOND]},
            deadlines={"region_seconds": WAIT_S},
        ),
    )
    assert first.state(moving) == State.SUBMITTED and groups(first) == {group_name(moving): 1}
    first.h.clock.advance(WAIT_S + 1)
    first.tick()
    record = first.h.ctx.store.get(moving)
    assert record.state == State.FAILED and record.region == SECOND, record.reason
    assert "not found" in record.reason, record.reason
    eventually(lambda: first.rayjobs() == [], "its RayJob gone from the region it left", 60)
    eventually(lambda: not any(groups(first).values()), "its group in the region it left at zero", 60)
    held = [a for a in first.h.ctx.allocations.all() if a.cluster.region == FIRST]
    assert all(moving not in a.holders for a in held)
    second.plane.kubectl("create", "namespace", second.namespace)  # for the fixture's clean-up
