"""Where a run's time went: the record's timings (its states, then the job's phases) and the trainer's phase
lines read back from the driver log."""

from __future__ import annotations

import datetime as dt

from functions.core.joblog import progress
from functions.core.result import Phase, Progress, RunResult
from functions.core.runs import RunRecord, State, Transition

T0 = dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_an_ended_run_keeps_seconds_in_each_state_then_the_jobs_phases_in_order():
    record = RunRecord(
        run_id="r-1",
        state=State.RECEIVED,
        source={"kind": "upload"},
        created_at=T0,
        updated_at=T0,
        history=[Transition(state=State.RECEIVED, at=T0)],
    )
    record = record.moved(State.SUBMITTED, at(10.5)).moved(State.RUNNING, at(12))
    assert record.timings == {}, "written when the run ends"
    job = {"preflight": 0.1, "starting 2 workers": 9.0, "training on 28 samples": 3.0}
    ended = record.moved(State.SUCCEEDED, at(40), result=RunResult(timings=job))
    assert ended.timings == {
        "RECEIVED": 10.5,
        "SUBMITTED": 1.5,
        "RUNNING": 28.0,
        "job: preflight": 0.1,
        "job: starting 2 workers": 9.0,
        "job: training on 28 samples": 3.0,
    }
    assert list(ended.timings)[3:] == [f"job: {phase}" for phase in job], "the job's phases in the order they ran"


def test_a_state_entered_again_adds_up_across_attempts():
    history = [Transition(state=State.RECEIVED, at=T0)]
    record = RunRecord(
        run_id="r-1", state=State.RECEIVED, source={"kind": "upload"}, created_at=T0, updated_at=T0, history=history
    )
    record = record.moved(State.SUBMITTED, at(1)).moved(State.RUNNING, at(2))
    record = record.moved(State.QUEUED, at(12), "lost its nodes").moved(State.SUBMITTED, at(20))
    ended = record.moved(State.RUNNING, at(21)).moved(State.FAILED, at(31), "training failed")
    assert ended.timings == {"RECEIVED": 1.0, "SUBMITTED": 2.0, "RUNNING": 20.0, "QUEUED": 8.0}


def test_phase_lines_are_read_in_order_with_progress_and_a_cut_line_is_skipped():
    text = (
        '\x1b[36m(RayTrainWorker pid=1)\x1b[0m RAYTUNE_PHASE {"phase": "loading the model"}\n'
        'RAYTUNE_PHASE {"phase": "loading the model", "seconds": 0.2}\n'
        'RAYTUNE_PROGRESS {"step": 2, "max_steps": 4, "loss": 2.5}\n'
        'RAYTUNE_PHASE {"phase": "saving'
    )
    events = list(progress(text))
    assert events == [
        Phase(phase="loading the model"),
        Phase(phase="loading the model", seconds=0.2),
        Progress(step=2, max_steps=4, loss=2.5),
    ]
