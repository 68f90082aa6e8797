"""A marker's quiet note (functions/core/quiet.py): a run the tick passes by on its note is one that `decide` would
leave alone, whatever its record and whatever the listing shows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from functions.core import quiet
from functions.core.decide import Action, Facts, JobSeen, Rules, decide, job_summary
from functions.core.runs import State
from tests.unit.test_decide import NOW, record

STATUSES = [
    None,
    {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"},
    {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running", "startTime": "2026-12-05T10:00:00Z"},
    {"jobStatus": "RUNNING", "jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"},
    {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"},
    {"jobStatus": "", "jobDeploymentStatus": "Running"},
    {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"},
    {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "message": "lost its nodes"},
    {"jobStatus": "STOPPED", "jobDeploymentStatus": "Running"},
]


@given(
    state=st.sampled_from(list(State)),
    cancel=st.booleans(),
    nodes=st.integers(0, 3),
    held=st.sampled_from(STATUSES),
    listed=st.sampled_from(STATUSES),
    settled=st.booleans(),
)
def test_a_run_passed_by_on_its_note_is_one_decide_leaves_alone(state, cancel, nodes, held, listed, settled):
    submitted = state in (State.SUBMITTED, State.RUNNING) or state.terminal
    run = record(state, age=100, idle=50, submitted=90 if submitted else None, cancel=cancel, settled=settled)
    run = run.model_copy(
        update={"job": job_summary(held), "nodes": {f"node-{i}": "spot" for i in range(nodes)}, "generation": 7}
    )
    note = quiet.noted(run)
    if note is None or not quiet.still(note, listed):
        return  # read and decided as before
    assert listed is not None and listed.get("jobStatus") == "RUNNING", "no step would look at its pods or nodes"
    assert len(run.nodes) >= run.run_config().group_nodes, "nor ask for its nodes"
    facts, tick = Facts(now=NOW), Rules(tick_releases=True)
    assert decide(run, facts, tick).action is Action.OBSERVE_JOB
    assert decide(run, facts.learned(job=JobSeen(listed)), tick).action is Action.NOTHING


def test_a_note_is_read_back_only_for_the_generation_it_describes():
    run = record(State.RUNNING, submitted=10).model_copy(
        update={"job": job_summary(STATUSES[1]), "nodes": {"a": "spot", "b": "spot"}, "generation": 42}
    )
    note = quiet.noted(run)
    assert note is not None and note.job == run.job_name and note.where[2] == "default"
    metadata = {quiet.NOTE: note.encoded(1000.0)}
    assert quiet.read(run.run_id, metadata, "42", 1000.0) == note
    assert quiet.read(run.run_id, metadata, "43", 1000.0) is None, "an older release noted a newer record"
    assert quiet.read(run.run_id, metadata, None, 1000.0) is None
    assert quiet.read(run.run_id, metadata, "42", 1000.0 + quiet.TRUSTED_S) is None, "read again once an hour"
    assert quiet.noted(run.model_copy(update={"cancel_requested": True})) is None
    assert quiet.noted(run.model_copy(update={"nodes": {"a": "spot"}})) is None, "a node not yet known"
    assert quiet.still(note, dict(STATUSES[1]))
    assert not quiet.still(note, None), "a job gone is a change"
    assert not quiet.still(note, {**STATUSES[1], "message": "new"})


@given(text=st.text(max_size=200))
def test_any_metadata_reads_as_a_note_or_none(text):
    assert quiet.read("run-1", {quiet.NOTE: text}, "1", 0.0) is None or text.startswith("{")
    assert quiet.writing_since({quiet.WRITING: text}) is None or text
