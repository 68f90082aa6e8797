"""A run's story as every follower tells it (issue 40): phases and steps once each, one line per change of state
or reason, each new attempt, the end said once by the summary, and the exit code of each outcome."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from functions.core.regions import Placement
from functions.core.result import PHASE_MARKER, PROGRESS_MARKER, RunResult
from functions.core.runs import Attempt, State
from functions.core.story import EXIT_CODES, QUIET_S, Story, exit_code, summary
from tests.builders import make_run

pytestmark = pytest.mark.unit
T0 = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)


def phase(name: str, seconds: float | None = None, trial: str | None = None) -> str:
    event = {"phase": name, "seconds": seconds} | ({"trial": trial} if trial else {})
    return f"(RayTrainWorker pid=1) {PHASE_MARKER}{json.dumps(event)}\n"


def step(n: int, eval_loss: float | None = None) -> str:
    return f"{PROGRESS_MARKER}{json.dumps({'step': n, 'max_steps': 4, 'loss': 1.0, 'eval_loss': eval_loss})}\n"


def test_phases_steps_and_states_are_each_said_once():
    story = Story()
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("RayJob r-1").obj()) == [
        "run r-1: SUBMITTED (RayJob r-1)"
    ]
    log = "noise from Ray\n" + phase("preflight") + phase("preflight", 0.01) + phase("starting 2 workers")
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log) == [
        "run r-1: RUNNING",
        "  starting 2 workers...",
    ]
    log += phase("starting 2 workers", 8.84) + step(1) + step(1)  # a print patch doubles each line
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log) == [
        "  starting 2 workers: 8.8s",
        "  step 1/4 · loss 1.0000",
    ]
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log) == [], "nothing new, nothing said"
    # The kept copy replaces the live log at the end (shorter: only its last part): nothing is said again.
    kept = step(1) + step(2, eval_loss=0.5)
    assert story.observe(make_run("r-1", State.SUCCEEDED, T0).reason("done").obj(), kept) == [
        "  step 2/4 · loss 1.0000 · eval loss 0.5000"
    ]


def test_a_new_reason_in_the_same_state_is_said_under_it_not_as_the_state_again():
    story = Story()
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("RayJob r-1").obj()) == [
        "run r-1: SUBMITTED (RayJob r-1)"
    ]
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("no capacity in us-central1").obj()) == [
        "  no capacity in us-central1"
    ]
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("no capacity in us-central1").obj()) == []
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).obj()) == [], "a reason cleared says nothing"
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj()) == ["run r-1: RUNNING"]


def test_a_moves_wait_is_the_same_whole_seconds_in_its_line_and_the_summary():
    left = Placement(region="us-central1", attempt=1, since=T0, until=T0 + dt.timedelta(seconds=21.7))
    left = left.model_copy(update={"why": "waited 21s for capacity in us-central1 (at most 20s in one region)"})
    moved = (
        make_run("r-1", State.SUCCEEDED, T0)
        .with_fields(placements=[left, Placement(region="europe-west4", attempt=1, since=left.until)])
        .obj()
    )
    assert Story().observe(moved)[0].startswith("run r-1: moved from us-central1 to europe-west4 (waited 21s")
    assert "  regions          us-central1 (waited 21s) -> europe-west4" in summary(moved)


def test_each_trials_phases_are_said_with_its_name_and_a_trials_start_is_told():
    """Two trials start at once in a sweep: each one's phases, begun and ended, are its own lines."""
    story = Story()
    story.observe(make_run("r-1", State.RUNNING, T0).obj(), phase("sweeping 4 trials, 2 at once"))
    log = phase("sweeping 4 trials, 2 at once")
    log += phase("starting 1 workers", trial="trial-000") + phase("starting 1 workers", trial="trial-001")
    log += phase("starting 1 workers", 9.12, trial="trial-001")
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log) == [
        "  trial-000 · starting 1 workers...",
        "  trial-001 · starting 1 workers: 9.1s",
    ]
    log += phase("starting 1 workers", trial="trial-002")
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log) == ["  trial-002 · starting 1 workers..."]


def test_a_quiet_stretch_says_what_is_under_way_and_for_how_long():
    """Followed with a clock: after QUIET_S without a line, the phase begun last and still open, or the state
    still waited in, is said with its time so far; then not again for another QUIET_S."""
    story = Story()
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("RayJob r-1").obj(), now=100.0) == [
        "run r-1: SUBMITTED (RayJob r-1)"
    ]
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("RayJob r-1").obj(), now=100.0 + QUIET_S - 1) == []
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("RayJob r-1").obj(), now=100.0 + QUIET_S) == [
        f"  still SUBMITTED after {QUIET_S:.0f}s"
    ]
    assert story.observe(make_run("r-1", State.SUBMITTED, T0).reason("RayJob r-1").obj(), now=100.0 + QUIET_S + 5) == []
    log = phase("sweeping 4 trials, 2 at once") + phase("starting 1 workers", trial="trial-002")
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log, now=200.0) == [
        "run r-1: RUNNING",
        "  sweeping 4 trials, 2 at once...",
        "  trial-002 · starting 1 workers...",
    ]
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log, now=225.0) == [
        "  trial-002 · starting 1 workers... 25s so far"
    ]
    log += phase("starting 1 workers", 30.0, trial="trial-002")
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log, now=230.0) == [
        "  trial-002 · starting 1 workers: 30.0s"
    ]
    assert story.observe(make_run("r-1", State.RUNNING, T0).obj(), log, now=251.0) == [
        "  sweeping 4 trials, 2 at once... 51s so far"
    ]
    assert Story().observe(make_run("r-1", State.RUNNING, T0).obj(), log) == Story().observe(
        make_run("r-1", State.RUNNING, T0).obj(), log, now=1.0
    )


def test_a_line_still_being_written_is_said_whole_at_the_next_look():
    """A live log is read while Ray writes it: a look may end inside a line. Cut at every point of a phase's
    end and a step, each is said once, whole, when its line is complete."""
    begun, ended = phase("starting 2 workers"), phase("starting 2 workers", 8.84)
    written = begun + ended + step(1)
    for cut in range(len(written) + 1):
        story = Story()
        told = story.observe(make_run("r-1", State.RUNNING, T0).obj(), written[:cut]) + story.observe(
            make_run("r-1", State.RUNNING, T0).obj(), written
        )
        assert [line for line in told if line.startswith("  ")] == [
            # begun alone in the first look: said as begun, then as ended
            *(["  starting 2 workers..."] if len(begun) <= cut < len(begun + ended) else []),
            "  starting 2 workers: 8.8s",
            "  step 1/4 · loss 1.0000",
        ], cut


def test_a_new_attempt_says_so_and_its_steps_are_told_again():
    story = Story()
    story.observe(make_run("r-1", State.RUNNING, T0).obj(), step(1) + step(2))
    again = (
        make_run("r-1", State.SUBMITTED, T0)
        .reason("RayJob r-1-2")
        .with_fields(
            attempts=[
                Attempt(number=1, job="r-1", requested_at=T0, by="upload", outcome="FAILED: lost nodes"),
                Attempt(number=2, job="r-1-2", requested_at=T0, by="lost nodes"),
            ]
        )
        .obj()
    )
    assert story.observe(again, step(2)) == [
        "attempt 2: RayJob r-1-2 (lost nodes)",
        "run r-1: SUBMITTED (RayJob r-1-2)",
        "  step 2/4 · loss 1.0000",
    ]


def test_the_end_is_said_once_by_the_summary():
    story = Story()
    story.observe(make_run("r-1", State.RUNNING, T0).obj())
    ended = (
        make_run("r-1", State.FAILED, T0)
        .reason("OSError: disk full")
        .with_fields(result=RunResult(adapter_path="gs://b/a"))
        .obj()
    )
    assert story.observe(ended) == [], "the summary says it"
    lines = summary(ended, wall_s=12.34, record_path="/w/records/r-1.json")
    assert lines[0] == "run r-1 FAILED in 12.3s: OSError: disk full"
    assert sum("FAILED" in line for line in lines) == 1 and lines[-1].endswith("/w/records/r-1.json")
    assert (
        summary(make_run("r-1", State.SUCCEEDED, T0).reason("Job finished successfully.").obj())[0]
        == "run r-1 SUCCEEDED"
    )


def test_exit_codes_tell_the_outcome():
    assert [exit_code(s) for s in (State.SUCCEEDED, State.SKIPPED, State.FAILED, State.REJECTED, State.CANCELLED)] == [
        0,
        0,
        1,
        2,
        3,
    ]
    assert set(EXIT_CODES) == {s for s in State if s.terminal}, "every end has its code"


def test_an_early_stop_is_said_once_as_a_decision_not_a_crash():
    from functions.core.result import PROGRESS_MARKER
    from functions.core.story import Story

    why = "ASHA: eval_loss 6.4177, not in the best 1/2 of the trials at its rung"
    log = "\n".join(
        PROGRESS_MARKER + json.dumps(line)
        for line in (
            {"trial": "trial-002", "step": 8, "max_steps": 28, "eval_loss": 6.4177},
            {"trial": "trial-002", "step": 8, "max_steps": 8, "stopped_early": why},
            {"trial": "trial-002", "step": 8, "max_steps": 8, "stopped_early": why},  # read again: said once
        )
    )
    said = Story().observe(make_run("r-1", State.RUNNING, T0).obj(), log)
    assert said.count(f"  trial-002 stopped early at step 8 ({why})") == 1, said
