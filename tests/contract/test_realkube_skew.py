"""Version skew on the real control plane (issue 63): the previous releases' own handlers (tests/releases.py), served
from their own trees beside this release's, on two real kube-apiservers with the real KubeRay operator. A run this
release moved to europe-west4 and that runs there, and a run waiting in us-central1 to move: the previous release
quarantines neither, stops no job, follows the running one to its end and releases its group there, and leaves the
waiting one waiting in its region (a release that reads the accepted config moves it, as this one would); this
release then reads all it wrote."""

from __future__ import annotations

import pytest

from functions.core import release
from functions.core.allocation import group_name
from functions.core.runs import State
from tests import releases
from tests.contract.conftest import FIRST, SECOND
from tests.contract.test_realkube import eventually, running_workers
from tests.contract.test_realkube_regions import WAIT_S, groups
from tests.integration.test_functions import watch

PREVIOUS = releases.previous()


@pytest.fixture(scope="module", params=[v for v, _ in PREVIOUS])
def previous(request, tmp_path_factory):
    return request.param, releases.extracted(request.param, tmp_path_factory)


def test_the_previous_release_follows_a_moved_run_and_leaves_a_waiting_one_on_the_real_operator(
    regions, previous, bucket, tmp_path
):
    first, second = regions[FIRST], regions[SECOND]
    h = first.h
    version, tree = previous
    gpu = {"nodes": 1, "gpus_per_node": 8}
    movable = {"region": FIRST, "fallback_regions": [SECOND]}
    moved = first.launch(
        "moved", first.config("moved", scaling=gpu, cluster=movable, deadlines={"region_seconds": WAIT_S})
    )
    h.clock.advance(WAIT_S + 1)
    first.tick()
    assert h.ctx.store.get(moved).region == SECOND
    running_workers(second, 1)
    second.end_job(moved, "RUNNING")
    assert second.until_state(moved, State.RUNNING) == State.RUNNING
    waiting = first.launch(
        "waiting", first.config("waiting", scaling=gpu, cluster=movable, deadlines={"region_seconds": WAIT_S})
    )
    assert first.state(waiting) == State.SUBMITTED

    planes = {FIRST: first.plane, SECOND: second.plane}
    kubes = {region: {"url": p.api, "token": p.token, "ca": p.ca} for region, p in planes.items()}
    settings = {
        "events_topic": h.ctx.settings.events_topic,
        "policy": {"namespaces": ["rk-*"], "regions": [FIRST, SECOND]},
    }
    log = tmp_path / f"release-{version}.log"
    with releases.serve(
        version,
        tree,
        bucket=bucket,
        project=h.ctx.settings.project,
        kubes=kubes,
        settings=settings,
        now=h.clock(),
        log=log,
    ) as theirs:

        def old_tick():
            theirs.sync(h.clock())
            watch(theirs.urls)

        for _ in range(2):
            old_tick()
        h.clock.advance(WAIT_S + 1)
        old_tick()
        assert h.ctx.store.blobs.list("quarantine/") == [], log.read_text()[-3000:]
        record = h.ctx.store.get(waiting)
        if release.version_key(version) >= release.version_key(release.ACCEPTED_READER):
            # It reads the accepted config (fallback regions and all): it carries out the move this release would.
            assert record.state == State.SUBMITTED and record.region == SECOND
            assert sorted(second.rayjobs()) == sorted([moved, record.job_name]), "the moved run's job kept"
            eventually(lambda: first.rayjobs() == [], "the waiting run's job stopped where it waited", 60)
        else:
            assert record.state == State.SUBMITTED and record.region == FIRST
            assert first.rayjobs() == [waiting] and second.rayjobs() == [moved], "no job stopped"
        # The moved run ends; the previous release records it where it ran and releases its group there.
        second.write_result(moved)
        second.end_job(moved, "SUCCEEDED")

        def ended():
            old_tick()
            return h.ctx.store.get(moved).state.terminal and h.ctx.store.get(moved).settled

        eventually(ended, f"the moved run ended under {version}", 90, 1)
        assert h.ctx.store.get(moved).state == State.SUCCEEDED
        eventually(lambda: not groups(second).get(group_name(moved)), "its group in europe-west4 released", 60)
    # This release reads back everything, and the waiting run is still its to move or end.
    first.tick()
    assert h.ctx.store.blobs.list("quarantine/") == []
    assert h.ctx.store.get(waiting).state in (State.SUBMITTED, State.QUEUED)
    first.tick({"kind": "cancel", "run_id": waiting})
    assert first.until_state(waiting, State.CANCELLED) == State.CANCELLED
