"""A run waiting for capacity moves to its next region (functions/core/regions.py, decide._move_region): the job
stopped first, the record placed in the next region as the same attempt, queued for that region's RayCluster; in
its last region the pending deadline ends it; an attempt after lost nodes comes round to a region an earlier one
left; records of releases before regions read as they were."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from functions.core.config import RunConfig
from functions.core.decide import Action, Facts, JobSeen, Rules, decide
from functions.core.regions import Placement, next_region, placed
from functions.core.runs import PLAIN_FORMAT, Attempt, RunRecord, State, Transition, format_of

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
WAITING = {"jobStatus": "PENDING", "jobDeploymentStatus": "Running"}
STUCK = "FailedScaleUp: GCE out of resources (a4-highgpu-8g)"
TWO = {
    "name": "t",
    "scaling": {
        "nodes": 2,
        "gpus_per_node": 8,
        "capacity": [
            {"kind": "reservation", "name": "a4-res", "region": "us-central1"},
            {"kind": "flex-start", "region": "europe-west4"},
            {"kind": "spot"},
        ],
    },
    "cluster": {"region": "us-central1", "fallback_regions": ["europe-west4"]},
    "deadlines": {"pending_seconds": 3600, "region_seconds": 600},
}


def ago(seconds: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


def submitted(waited: float, config: dict | None = None, **fields) -> RunRecord:
    """A run submitted `waited` s ago whose job still waits (as last seen)."""
    cfg = RunConfig.model_validate(config or TWO).model_dump(mode="json")
    return RunRecord(
        run_id="run-1",
        state=State.SUBMITTED,
        source={"kind": "upload", "ref": "gs://b/c#1"},
        created_at=ago(waited + 5),
        updated_at=ago(waited),
        config=cfg,
        history=[
            Transition(state=State.RECEIVED, at=ago(waited + 5)),
            Transition(state=State.SUBMITTED, at=ago(waited)),
        ],
        job=WAITING,
        **fields,
    )


def facts(**seen) -> Facts:
    return Facts(now=NOW, job=JobSeen(WAITING, stuck=STUCK), **seen)


def test_each_region_gets_its_own_options_and_cluster():
    cfg = RunConfig.model_validate(TWO)
    here, there = placed(cfg, "us-central1"), placed(cfg, "europe-west4")
    assert here.cluster.region == "us-central1" and there.cluster.region == "europe-west4"
    assert [o.describe() for o in here.scaling.capacity] == ["reservation a4-res", "spot"]
    assert [o.describe() for o in there.scaling.capacity] == ["flex-start", "spot"]


def test_a_run_waiting_past_its_bound_stops_its_job_then_moves_as_the_same_attempt():
    run = submitted(601)
    assert decide(run, facts()).action is Action.STOP_WAITING_JOB  # first: it must not take nodes there later
    step = decide(run, facts(job_stopped=True))
    assert step.action is Action.MOVE and step.move is not None
    assert step.move.state is State.QUEUED
    assert step.move.reason == (
        f"moves to europe-west4: waited 601s for capacity in us-central1 (at most 600s in one region): {STUCK}"
    )
    left, now = step.move.placements
    assert (left.region, left.since, left.until, left.attempt) == ("us-central1", ago(601), NOW, 1)
    assert (now.region, now.since, now.until) == ("europe-west4", NOW, None)
    moved = run.moved(State.QUEUED, NOW, step.move.reason, placements=step.move.placements)
    assert moved.region == "europe-west4" and moved.attempt == 1 and moved.job_name == "run-1"
    assert moved.run_config().cluster.region == "europe-west4"
    assert moved.current.submitted_at is None  # not submitted there yet: its wait in us-central1 held no nodes
    # Written for every release a deployment may roll back to: `config` as placed in europe-west4 (what a release
    # before regions follows), the accepted config with its regions beside it; read back, the run as accepted.
    written = moved.model_dump(mode="json")
    assert written["config"]["cluster"]["region"] == "europe-west4" and written["format"] == PLAIN_FORMAT
    assert "fallback_regions" not in written["config"]["cluster"]
    assert written["accepted_config"]["cluster"]["fallback_regions"] == ["europe-west4"]
    assert RunRecord.model_validate(written).accepted_config().cluster.regions == ("us-central1", "europe-west4")


def test_within_its_bound_a_run_waits_and_the_operators_default_applies_where_the_config_says_none():
    assert decide(submitted(599), facts()).action is Action.MOVE  # the reason (GKE's words) is recorded
    assert decide(submitted(599, reason=STUCK), facts()).action is Action.NOTHING
    config = {**TWO, "deadlines": {"pending_seconds": 3600}}
    operator = Rules(region_seconds=1800)
    assert decide(submitted(1000, config, reason=STUCK), facts(), operator).action is Action.NOTHING
    assert decide(submitted(1801, config, reason=STUCK), facts(), operator).action is Action.STOP_WAITING_JOB


def test_a_running_job_never_moves():
    run = submitted(5000)
    step = decide(run, Facts(now=NOW, job=JobSeen({"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})))
    assert step.move is not None and step.move.state is State.RUNNING and step.move.placements is None


def test_in_its_last_region_the_pending_deadline_ends_it():
    placements = [
        Placement(region="us-central1", attempt=1, since=ago(4000), until=ago(3601), why="waited"),
        Placement(region="europe-west4", attempt=1, since=ago(3601)),
    ]
    run = submitted(3601, placements=placements)
    assert decide(run, facts()).action is Action.STOP_JOB
    step = decide(run, facts(job_stopped=True))
    assert step.move is not None and step.move.state is State.FAILED
    assert "deadlines.pending_seconds 3600" in (step.move.reason or "")


def test_a_run_whose_nodes_came_or_whose_job_changed_as_it_was_stopped_never_moves():
    run = submitted(601, reason=STUCK)
    bound = Facts(now=NOW, job=JobSeen(WAITING, stuck=STUCK, bound=True))
    assert decide(run, bound).action is Action.NOTHING  # its worker pod is bound: it waits for its pods, here
    refused = decide(run, Facts(now=NOW, move_refused="its job is RUNNING now"))
    assert refused.action is Action.OBSERVE_JOB  # looked at again as it is now
    running = JobSeen({"jobStatus": "RUNNING"})
    step = decide(run, Facts(now=NOW, move_refused="its job is RUNNING now", job=running))
    assert step.move is not None and step.move.state is State.RUNNING and step.move.placements is None


def test_a_moved_run_waiting_for_its_new_regions_cluster_fails_at_its_pending_deadline_from_the_move():
    placements = [
        Placement(region="us-central1", attempt=1, since=ago(4200), until=ago(3601), why="waited"),
        Placement(region="europe-west4", attempt=1, since=ago(3601)),
    ]
    run = submitted(4200, placements=placements).moved(State.QUEUED, ago(3601), "moves to europe-west4")
    step = decide(run, Facts(now=NOW))  # every ENSURE_CLUSTER there raised (its API answers 500)
    assert step.move is not None and step.move.state is State.FAILED
    assert step.move.reason == (
        "not submitted in europe-west4 within deadlines.pending_seconds (3600s) of its move there"
    )
    assert decide(run, Facts(now=ago(2))).action is Action.ADMIT  # within it, it goes on


def test_the_bound_never_outlasts_the_pending_deadline():
    config = {**TWO, "deadlines": {"pending_seconds": 900, "region_seconds": 3600}}
    step = decide(submitted(901, config), facts(job_stopped=True))
    assert step.move is not None and step.move.state is State.QUEUED and "at most 900s" in (step.move.reason or "")


def test_a_later_attempt_comes_round_to_a_region_an_earlier_one_left():
    cfg = RunConfig.model_validate(TWO)
    assert next_region(cfg, "europe-west4", set()) == "us-central1"
    assert next_region(cfg, "europe-west4", {"us-central1"}) is None
    placements = [
        Placement(region="us-central1", attempt=1, since=ago(9000), until=ago(8000), why="waited"),
        Placement(region="europe-west4", attempt=1, since=ago(8000)),
    ]
    attempts = [
        Attempt(number=1, job="run-1", requested_at=ago(9000), by="upload", ended_at=ago(700), outcome="lost"),
        Attempt(number=2, job="run-1-2", requested_at=ago(700), by="lost nodes", submitted_at=ago(650)),
    ]
    run = submitted(650, placements=placements, attempts=attempts)
    step = decide(run, facts(job_stopped=True))
    assert step.move is not None and step.move.state is State.QUEUED
    assert step.move.placements[-1].region == "us-central1" and step.move.placements[-1].attempt == 2
    assert step.move.attempts is not None and step.move.attempts[-1].submitted_at is None


def test_a_config_without_regions_is_written_as_before():
    plain = RunConfig.model_validate({"name": "t"}).model_dump(mode="json")
    assert "fallback_regions" not in plain["cluster"] and "region_seconds" not in plain["deadlines"]
    assert format_of(plain) == PLAIN_FORMAT


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"cluster": {"region": "us-central1", "fallback_regions": ["us-central1"]}}, "repeats a region"),
        (
            {"scaling": {**TWO["scaling"], "capacity": [{"kind": "spot", "region": "asia-east1"}]}},
            "scaling.capacity[0].region 'asia-east1' is not one of the run's regions",
        ),
        (
            {"scaling": {**TWO["scaling"], "capacity": [{"kind": "spot", "region": "us-central1"}]}},
            "scaling.capacity offers no option in europe-west4",
        ),
    ],
)
def test_unusable_regions_are_rejected_naming_the_field(change, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        RunConfig.model_validate({**TWO, **change})
