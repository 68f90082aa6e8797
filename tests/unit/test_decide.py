"""The decision function as a table: every state x RayJob status x deadline, cancel and claim case,
then a property: driven by any sequence of observations, the loop ends, never makes an illegal move,
and never cancels a submitted run without stopping its job first."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.core.allocation import Admission
from functions.core.champion import Promotion
from functions.core.decide import CLAIM_SECONDS, Action, Facts, JobSeen, Rules, decide
from functions.core.fingerprint import Inputs
from functions.core.platform import ClusterReadiness
from functions.core.runs import ALLOWED, RunRecord, State
from tests.builders import make_run

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
PENDING = 600
QUEUE = 3000
CONFIG = {
    "name": "t",
    "scaling": {"nodes": 2},
    "deadlines": {"pending_seconds": PENDING, "queue_seconds": QUEUE, "run_seconds": 86400},
}
S = State
A = Action


def ago(seconds: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


def record(
    state: State,
    *,
    age: float = 0,
    idle: float | None = None,
    submitted: float | None = None,
    cancel: bool = False,
    settled: bool = False,
    reason: str | None = None,
    job: dict | None = None,
    dequeued: float | None = None,
    position: int | None = None,
    kind: str = "upload",
    config: dict | None = None,
    inputs: Inputs | None = None,
    promotion: Promotion | None = None,
    attempts: list | None = None,
) -> RunRecord:
    """A run (tests/builders.py) created `age` s ago, last written `idle` s ago, submitted `submitted` s ago, out of
    the queue `dequeued` s ago: the decision table's vocabulary of time."""
    passed = [(S.RECEIVED, ago(age))]
    if dequeued is not None:
        passed += [(S.QUEUED, ago(age)), (S.PROVISIONING, ago(dequeued))]
    if submitted is not None:
        passed.append((S.SUBMITTED, ago(submitted)))
    if state not in (S.RECEIVED, S.SUBMITTED):
        passed.append((state, ago(idle or 0)))
    return (
        make_run("run-1", state, ago(age))
        .source(kind)
        .updated(ago(age if idle is None else idle))
        .config(config or CONFIG)
        .reason(reason)
        .history(*passed)
        .with_fields(
            inputs=inputs,
            promotion=promotion,
            cancel_requested=cancel,
            settled=settled,
            job=job,
            queue_position=position,
            attempts=attempts or [],
        )
        .obj()
    )


RULE_FIELDS = {field.name for field in dataclasses.fields(Rules)}
LOST = ("pod w-1 on node gke-a4-1 at 2026-12-02 11:58:00Z: TerminationByKubelet",)
READY = ClusterReadiness("ready")
IN = Admission(True, held=0, limit=5)
WAIT = Admission(False, position=2, queued=3, held=4, limit=5)
WAIT_REASON = WAIT.describe(2)
CREATING = ClusterReadiness("provisioning", "creating GKE Autopilot cluster raytune")
BROKEN = ClusterReadiness("error", "GKE cluster raytune is ERROR: quota")
LATE = PENDING + 1
EXPIRED = CLAIM_SECONDS + 1
CHANGED = Inputs(fingerprint="f2", config_sha256="c", code_sha256="k", dataset_sha256="d", dataset_objects=3)
SAME = CHANGED.model_copy(update={"unchanged_since": "nightly-20261201"})
EVALUATED = {**CONFIG, "evaluation": {"samples": 4}}
# May move: a submitted run waiting past 60 s in us-central1 goes to europe-west4 (functions/core/regions.py).
MOVING = {
    **CONFIG,
    "cluster": {"region": "us-central1", "fallback_regions": ["europe-west4"]},
    "deadlines": {**CONFIG["deadlines"], "region_seconds": 60},
}
VERDICT = Promotion(promoted=True, reason="rougeL 0.5 vs 0.4 of the base model: better by 0.1 > margin 0.0")

NIGHTLY = [
    (
        "nightly: fingerprint its inputs first",
        record(S.RECEIVED, kind="nightly"),
        dict(handler="launch", created=True),
        A.FINGERPRINT,
        None,
        None,
    ),
    (
        "nightly with nothing new: skipped",
        record(S.RECEIVED, kind="nightly"),
        dict(handler="launch", created=True, inputs=SAME),
        A.MOVE,
        S.SKIPPED,
        "nothing new since nightly-20261201",
    ),
    (
        "nightly while last night's still trains the same inputs: skipped",
        record(S.RECEIVED, kind="nightly"),
        dict(handler="launch", created=True, inputs=SAME.model_copy(update={"in_flight": True})),
        A.MOVE,
        S.SKIPPED,
        "nightly-20261201 is still training the same inputs",
    ),
    (
        "nightly with new inputs: keep them",
        record(S.RECEIVED, kind="nightly"),
        dict(handler="launch", created=True, inputs=CHANGED),
        A.MOVE,
        S.RECEIVED,
        None,
    ),
    (
        "nightly fingerprinted: ask for nodes",
        record(S.RECEIVED, kind="nightly", inputs=CHANGED),
        dict(handler="launch", created=True),
        A.ADMIT,
        None,
        None,
    ),
    (
        "cancelled before its fingerprint",
        record(S.RECEIVED, kind="nightly", cancel=True),
        dict(handler="launch", created=True),
        A.MOVE,
        S.CANCELLED,
        None,
    ),
    ("skipped: settle, no release", record(S.SKIPPED, kind="nightly"), {}, A.SETTLE, None, None),
    (
        "evaluated run succeeded: meet the champion",
        record(S.SUCCEEDED, submitted=50, config=EVALUATED),
        dict(scaled=True),
        A.CONCLUDE,
        None,
        None,
    ),
    (
        "then keep the verdict",
        record(S.SUCCEEDED, submitted=50, config=EVALUATED),
        dict(scaled=True, promotion=VERDICT),
        A.MOVE,
        S.SUCCEEDED,
        None,
    ),
    (
        "verdict kept: settle",
        record(S.SUCCEEDED, submitted=50, config=EVALUATED, promotion=VERDICT),
        dict(scaled=True),
        A.SETTLE,
        None,
        None,
    ),
    (
        "nightly succeeded: its inputs become the next night's baseline",
        record(S.SUCCEEDED, submitted=50, kind="nightly", inputs=CHANGED),
        dict(scaled=True),
        A.CONCLUDE,
        None,
        None,
    ),
    (
        "failed evaluated run: nothing to conclude",
        record(S.FAILED, submitted=50, config=EVALUATED),
        dict(scaled=True),
        A.SETTLE,
        None,
        None,
    ),
]

BEFORE_SUBMISSION = [
    # (id, record, facts, expected action, expected state, reason contains)
    (
        "new run: ask for its nodes",
        record(S.RECEIVED),
        dict(handler="launch", created=True),
        A.ADMIT,
        None,
        None,
    ),
    ("duplicate within the claim", record(S.RECEIVED, idle=10), dict(handler="launch"), A.NOTHING, None, None),
    (
        "duplicate after the claim",
        record(S.RECEIVED, idle=EXPIRED, age=EXPIRED),
        dict(handler="launch"),
        A.ADMIT,
        None,
        None,
    ),
    ("watcher leaves a claimed run", record(S.RECEIVED, idle=10), {}, A.NOTHING, None, None),
    (
        "a redelivery takes a claim its failed handler gave back",
        record(S.RECEIVED, idle=10).model_copy(update={"claim_released": True}),
        dict(handler="launch"),
        A.ADMIT,
        None,
        None,
    ),
    (
        "the watcher takes a claim given back",
        record(S.RECEIVED, idle=10).model_copy(update={"claim_released": True}),
        {},
        A.ADMIT,
        None,
        None,
    ),
    (
        "watcher takes over a dead launch",
        record(S.RECEIVED, idle=EXPIRED, age=EXPIRED),
        {},
        A.ADMIT,
        None,
        None,
    ),
    (
        "cancel before submission",
        record(S.RECEIVED, idle=EXPIRED, age=EXPIRED, cancel=True),
        {},
        A.MOVE,
        S.CANCELLED,
        "before submission",
    ),
    (
        "received past the deadline",
        record(S.RECEIVED, idle=EXPIRED, age=LATE),
        {},
        A.MOVE,
        S.FAILED,
        "pending_seconds (600s)",
    ),
    (
        "launch leaves provisioning to the watcher",
        record(S.PROVISIONING),
        dict(handler="launch"),
        A.NOTHING,
        None,
        None,
    ),
    ("provisioning: look again", record(S.PROVISIONING, age=30), dict(admission=IN), A.ENSURE_CLUSTER, None, None),
    ("provisioning cancelled", record(S.PROVISIONING, cancel=True), {}, A.MOVE, S.CANCELLED, "before submission"),
    ("provisioning past the deadline", record(S.PROVISIONING, age=LATE), {}, A.MOVE, S.FAILED, "pending_seconds"),
    ("cancel wins over the deadline", record(S.PROVISIONING, age=LATE, cancel=True), {}, A.MOVE, S.CANCELLED, None),
    (
        "cluster being created",
        record(S.RECEIVED),
        dict(handler="launch", created=True, admission=IN, cluster=CREATING),
        A.MOVE,
        S.PROVISIONING,
        "creating GKE",
    ),
    (
        "still being created: no write",
        record(S.PROVISIONING, reason=CREATING.message),
        dict(admission=IN, cluster=CREATING),
        A.NOTHING,
        None,
        None,
    ),
    (
        "new provisioning news",
        record(S.PROVISIONING, reason="older news"),
        dict(admission=IN, cluster=CREATING),
        A.MOVE,
        S.PROVISIONING,
        "creating GKE",
    ),
    ("broken cluster", record(S.PROVISIONING), dict(admission=IN, cluster=BROKEN), A.MOVE, S.FAILED, "quota"),
    ("ready: submit", record(S.PROVISIONING), dict(admission=IN, cluster=READY), A.SUBMIT, None, None),
    (
        "submitted",
        record(S.RECEIVED),
        dict(handler="launch", created=True, admission=IN, cluster=READY, submitted="RayJob run-1"),
        A.MOVE,
        S.SUBMITTED,
        "RayJob run-1",
    ),
    (
        "permanent submit error",
        record(S.RECEIVED),
        dict(handler="launch", created=True, submit_error="HTTP 404: ns"),
        A.MOVE,
        S.FAILED,
        "cannot submit: HTTP 404: ns",
    ),
    (
        "no room: queue it",
        record(S.RECEIVED),
        dict(handler="launch", created=True, admission=WAIT),
        A.MOVE,
        S.QUEUED,
        "queued 2 of 3",
    ),
    ("launch leaves the queue to the watcher", record(S.QUEUED), dict(handler="launch"), A.NOTHING, None, None),
    ("queued: ask again", record(S.QUEUED, age=60), {}, A.ADMIT, None, None),
    ("same place: no write", record(S.QUEUED, age=60, reason=WAIT_REASON), dict(admission=WAIT), A.NOTHING, None, None),
    ("moved up", record(S.QUEUED, age=60, reason="queued 3 of 3"), dict(admission=WAIT), A.MOVE, S.QUEUED, "queued 2"),
    ("admitted: look at the cluster", record(S.QUEUED, age=60), dict(admission=IN), A.ENSURE_CLUSTER, None, None),
    (
        "queued: admitted, ready, submit",
        record(S.QUEUED, age=60),
        dict(admission=IN, cluster=READY),
        A.SUBMIT,
        None,
        None,
    ),
    (
        "queued longer than pending_seconds is fine",
        record(S.QUEUED, age=LATE, reason=WAIT_REASON),
        dict(admission=WAIT),
        A.NOTHING,
        None,
        None,
    ),
    (
        "queue deadline counts from arrival",
        record(S.QUEUED, age=QUEUE + 1, position=2, reason=WAIT_REASON),
        {},
        A.MOVE,
        S.FAILED,
        "still queued (position 2)",
    ),
    ("queued cancelled", record(S.QUEUED, age=60, cancel=True), {}, A.MOVE, S.CANCELLED, "before submission"),
    (
        "pending deadline counts from leaving the queue",
        record(S.PROVISIONING, age=QUEUE, dequeued=30),
        dict(admission=IN),
        A.ENSURE_CLUSTER,
        None,
        None,
    ),
    (
        "out of the queue too long",
        record(S.PROVISIONING, age=QUEUE, dequeued=LATE),
        {},
        A.MOVE,
        S.FAILED,
        "pending_seconds",
    ),
    ("controller error", record(S.PROVISIONING), dict(error="boom"), A.MOVE, S.FAILED, "controller error: boom"),
]

RUNNING = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
GONE = "GKE cluster raytune in us-central1 does not exist (deleted?)"
GONE_REASON = f"{GONE}: its RayJob cannot be followed"
AFTER_SUBMISSION = [
    (
        "cluster deleted under a running run: say so",
        record(S.RUNNING, submitted=100, idle=50),
        dict(cluster_gone=GONE),
        A.MOVE,
        S.RUNNING,
        GONE_REASON,
    ),
    (
        "cluster still gone within the pending deadline: wait",
        record(S.RUNNING, submitted=900, idle=PENDING - 1, reason=GONE_REASON),
        dict(cluster_gone=GONE),
        A.NOTHING,
        None,
        None,
    ),
    (
        "cluster gone past the pending deadline: FAILED with the reason",
        record(S.SUBMITTED, submitted=900, idle=PENDING + 1, reason=GONE_REASON),
        dict(cluster_gone=GONE),
        A.MOVE,
        S.FAILED,
        f"{GONE_REASON}, for {PENDING + 1}s",
    ),
    (
        "launch leaves submitted runs to the watcher",
        record(S.SUBMITTED, submitted=1),
        dict(handler="launch"),
        A.NOTHING,
        None,
        None,
    ),
    ("look at the job", record(S.SUBMITTED, submitted=1), {}, A.OBSERVE_JOB, None, None),
    ("cancel: stop first", record(S.RUNNING, submitted=50, cancel=True), {}, A.STOP_JOB, None, None),
    (
        "cancel: then record",
        record(S.RUNNING, submitted=50, cancel=True),
        dict(job_stopped=True),
        A.MOVE,
        S.CANCELLED,
        "cancelled on request",
    ),
    ("job running", record(S.SUBMITTED, submitted=5), dict(job=JobSeen(RUNNING)), A.MOVE, S.RUNNING, None),
    (
        "still running: no write",
        record(S.RUNNING, submitted=5, job=RUNNING),
        dict(job=JobSeen(RUNNING)),
        A.NOTHING,
        None,
        None,
    ),
    (
        "running, new details",
        record(S.RUNNING, submitted=5, job=RUNNING),
        dict(job=JobSeen({**RUNNING, "startTime": "t"})),
        A.MOVE,
        S.RUNNING,
        None,
    ),
    (
        "succeeded",
        record(S.RUNNING, submitted=5),
        dict(job=JobSeen({"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})),
        A.MOVE,
        S.SUCCEEDED,
        None,
    ),
    (
        "failed",
        record(S.RUNNING, submitted=5),
        dict(
            job=JobSeen(
                {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "OOM"}
            )
        ),
        A.MOVE,
        S.FAILED,
        "AppFailed; OOM",
    ),
    (
        "stopped by someone else",
        record(S.RUNNING, submitted=5),
        dict(job=JobSeen({"jobStatus": "STOPPED"})),
        A.MOVE,
        S.FAILED,
        "stopped",
    ),
    ("RayJob gone", record(S.RUNNING, submitted=5), dict(job=JobSeen(None)), A.MOVE, S.FAILED, "disappeared"),
    (
        "KubeRay bug: Failed while RUNNING, stop it",
        record(S.RUNNING, submitted=5),
        dict(job=JobSeen({"jobStatus": "RUNNING", "jobDeploymentStatus": "Failed"})),
        A.STOP_JOB,
        None,
        None,
    ),
    (
        "KubeRay bug: then record",
        record(S.RUNNING, submitted=5),
        dict(job=JobSeen({"jobStatus": "RUNNING", "jobDeploymentStatus": "Failed"}), job_stopped=True),
        A.MOVE,
        S.FAILED,
        "jobDeploymentStatus Failed",
    ),
    (
        "validation failed",
        record(S.SUBMITTED, submitted=5),
        dict(job=JobSeen({"jobDeploymentStatus": "ValidationFailed", "message": "bad spec"})),
        A.STOP_JOB,
        None,
        None,
    ),
    (
        "initializing within the deadline",
        record(S.SUBMITTED, submitted=30, job={"jobDeploymentStatus": "Initializing"}),
        dict(job=JobSeen({"jobDeploymentStatus": "Initializing"})),
        A.NOTHING,
        None,
        None,
    ),
    (
        "KubeRay's status of the RayCluster lags its pods: ask it to look again",
        record(S.SUBMITTED, submitted=60, job={"jobDeploymentStatus": "Initializing"}),
        dict(job=JobSeen({"jobDeploymentStatus": "Initializing"}, lag="still said 'no state' 40s after")),
        A.ASK_STATUS,
        None,
        None,
    ),
    (
        "asked: the record says why the job waits and that KubeRay was asked",
        record(S.SUBMITTED, submitted=60, job={"jobDeploymentStatus": "Initializing"}),
        dict(
            job=JobSeen({"jobDeploymentStatus": "Initializing"}, lag="still said 'no state' 40s after"),
            status_asked="asked KubeRay to look at it again",
        ),
        A.MOVE,
        S.SUBMITTED,
        "still said 'no state' 40s after: asked KubeRay to look at it again",
    ),
    (
        "a lagging status past the deadline still ends the run, saying so",
        record(S.SUBMITTED, submitted=LATE),
        dict(
            job=JobSeen({"jobDeploymentStatus": "Initializing"}, lag="still said 'no state' 40s after"),
            status_asked="asking KubeRay to look at it again failed (403)",
            job_stopped=True,
        ),
        A.MOVE,
        S.FAILED,
        "still said 'no state' 40s after: asking KubeRay to look at it again failed (403)",
    ),
    (
        "first sight of initializing",
        record(S.SUBMITTED, submitted=30),
        dict(job=JobSeen({"jobDeploymentStatus": "Initializing"})),
        A.MOVE,
        S.SUBMITTED,
        None,
    ),
    (
        "hung initializing: stop",
        record(S.SUBMITTED, submitted=LATE),
        dict(job=JobSeen({"jobDeploymentStatus": "Initializing"})),
        A.STOP_JOB,
        None,
        None,
    ),
    (
        "hung initializing: fail",
        record(S.SUBMITTED, submitted=LATE),
        dict(job=JobSeen({"jobDeploymentStatus": "Initializing"}), job_stopped=True),
        A.MOVE,
        S.FAILED,
        f"still Initializing after {LATE}s",
    ),
    (
        "pending deadline counts from submission",
        record(S.SUBMITTED, age=5000, submitted=30),
        dict(job=JobSeen({"jobStatus": "PENDING", "jobDeploymentStatus": "Running"})),
        A.MOVE,
        S.SUBMITTED,
        None,
    ),
    (
        "hung PENDING",
        record(S.SUBMITTED, submitted=LATE),
        dict(job=JobSeen({"jobStatus": "PENDING", "jobDeploymentStatus": "Running"}), job_stopped=True),
        A.MOVE,
        S.FAILED,
        "the Ray job never started (jobStatus PENDING while KubeRay's deployment is Running",
    ),
    ("controller error while running", record(S.RUNNING, submitted=5), dict(error="boom"), A.MOVE, S.FAILED, "boom"),
]

AFTER_THE_END = [
    ("ended on the cluster: scale down", record(S.SUCCEEDED, submitted=50), {}, A.SCALE_DOWN, None, None),
    ("then settle", record(S.SUCCEEDED, submitted=50), dict(scaled=True), A.SETTLE, None, None),
    ("rejected: settle only", record(S.REJECTED), dict(handler="launch", created=True), A.SETTLE, None, None),
    ("failed before submission: release its place", record(S.FAILED), {}, A.SCALE_DOWN, None, None),
    ("released: settle", record(S.FAILED), dict(scaled=True), A.SETTLE, None, None),
    (
        "the tick releases after its runs: wait",
        record(S.SUCCEEDED, submitted=50),
        dict(tick_releases=True),
        A.NOTHING,
        None,
        None,
    ),
    (
        "released by the tick: settle",
        record(S.SUCCEEDED, submitted=50),
        dict(tick_releases=True, scaled=True),
        A.SETTLE,
        None,
        None,
    ),
    ("rejected: nothing to release, settle", record(S.REJECTED), dict(tick_releases=True), A.SETTLE, None, None),
    ("settled: nothing", record(S.CANCELLED, submitted=5, settled=True), {}, A.NOTHING, None, None),
    (
        "cancelled while this handler applied the job: stop it",
        record(S.CANCELLED),
        dict(handler="launch", created=True, submitted="RayJob run-1"),
        A.STOP_JOB,
        None,
        None,
    ),
    (
        "then release its workers",
        record(S.CANCELLED),
        dict(handler="launch", created=True, submitted="RayJob run-1", job_stopped=True),
        A.SCALE_DOWN,
        None,
        None,
    ),
    (
        "failed after the cluster apply: release its workers",
        record(S.FAILED),
        dict(submit_error="HTTP 422: job"),
        A.SCALE_DOWN,
        None,
        None,
    ),
    ("errors do not reopen an ended run", record(S.FAILED, settled=True), dict(error="boom"), A.NOTHING, None, None),
]


@pytest.mark.parametrize(
    ("case", "run", "facts", "action", "state", "reason"),
    BEFORE_SUBMISSION + AFTER_SUBMISSION + AFTER_THE_END + NIGHTLY,
    ids=[row[0] for row in BEFORE_SUBMISSION + AFTER_SUBMISSION + AFTER_THE_END + NIGHTLY],
)
def test_decision_table(case, run, facts, action, state, reason):
    # A row's observations, and the deployment's rules where it sets one (the tick's release: tick_releases)
    rules = {k: v for k, v in facts.items() if k in RULE_FIELDS}
    step = decide(run, Facts(now=NOW, **{k: v for k, v in facts.items() if k not in rules}), Rules(**rules))
    assert step.action == action, case
    moved = step.move
    assert (moved.state if moved else None) == state, case
    assert (moved is not None) == (step.action is A.MOVE), case
    if reason is not None:
        assert moved is not None and moved.reason is not None and reason in moved.reason, (case, moved)
    if moved is not None:
        assert moved.state == run.state or moved.state in ALLOWED[run.state], case
        # The trainer's result is read whenever a submitted run ends, unless the controller itself failed.
        assert moved.state == run.state or moved.collect_result == (
            moved.state.terminal and run.reached_cluster and "error" not in facts
        ), case


def test_every_state_has_rows():
    assert {row[1].state for row in BEFORE_SUBMISSION + AFTER_SUBMISSION + AFTER_THE_END + NIGHTLY} == set(State)


# --- property: the loop the handlers run, against any sequence of observations ------------------

CLUSTERS = st.sampled_from([READY, CREATING, BROKEN])
JOBS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "jobStatus": st.sampled_from(["", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]),
            "jobDeploymentStatus": st.sampled_from(
                [
                    "",
                    "Initializing",
                    "Running",
                    "Complete",
                    "Failed",
                    "ValidationFailed",
                    "Suspended",
                    "Retrying",
                    "Waiting",
                ]
            ),
        }
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    state=st.sampled_from(list(State)),
    handler=st.sampled_from(["launch", "watch"]),
    created=st.booleans(),
    cancel=st.booleans(),
    age=st.integers(0, 2 * PENDING),
    idle=st.integers(0, 2 * CLAIM_SECONDS),
    cluster=CLUSTERS,
    job=JOBS,
    submit_fails=st.booleans(),
    reached=st.booleans(),
    admitted=st.booleans(),
    nightly=st.booleans(),
    unchanged=st.booleans(),
    evaluated=st.booleans(),
    lost_nodes=st.booleans(),
    tick=st.booleans(),
    moving=st.booleans(),
    bound=st.booleans(),
    refused=st.booleans(),
)
def test_the_loop_ends_legally(
    state,
    handler,
    created,
    cancel,
    age,
    idle,
    cluster,
    job,
    submit_fails,
    reached,
    admitted,
    nightly,
    unchanged,
    evaluated,
    lost_nodes,
    tick,
    moving,
    bound,
    refused,
):
    if moving:  # a run that may move between regions, while it waits for its nodes (decide._move_region)
        state = S.SUBMITTED
    on_cluster = state in (S.SUBMITTED, S.RUNNING) or (
        state.terminal and state not in (S.REJECTED, S.SKIPPED) and reached
    )
    run = record(
        state,
        age=age,
        idle=min(idle, age),
        cancel=cancel,
        submitted=(age if moving else min(age, 10)) if on_cluster else None,
        kind="nightly" if nightly else "upload",
        config=MOVING if moving else EVALUATED if evaluated else CONFIG,
        inputs=CHANGED if nightly and state != S.RECEIVED else None,  # fingerprinted while RECEIVED
    )
    # `tick`: the watch tick's way, which releases each RayCluster once after its runs' steps, then settles them
    tick = tick and handler == "watch"
    facts = Facts(now=NOW, handler=handler, created=created and state == S.RECEIVED)
    actions = []
    for _ in range(16):
        step = decide(run, facts, Rules(tick_releases=tick))
        actions.append(step.action)
        if step.action is A.NOTHING and tick and run.state.terminal and not run.settled and not facts.scaled:
            actions[-1] = A.SCALE_DOWN  # what the tick does between its two passes
            facts = facts.learned(scaled=True)
            continue
        if step.action is A.NOTHING:
            break
        if step.action is A.MOVE:
            assert step.move is not None
            was_submitted = run.state in (S.SUBMITTED, S.RUNNING)
            if step.move.state == S.CANCELLED and was_submitted:
                assert A.STOP_JOB in actions, "a submitted run is cancelled only after its job was stopped"
            # raises InvalidTransition on an illegal move
            if step.move.state == S.SKIPPED:
                assert A.ADMIT not in actions and A.SUBMIT not in actions, "a skipped run never asks for nodes"
            if step.move.placements is not None:
                assert moving and was_submitted and step.move.state == S.QUEUED
                assert A.STOP_WAITING_JOB in actions, "a run leaves a region only after its job there was stopped"
                assert not bound, "a run whose worker pod is bound to a node never moves"
                assert not refused, "a run whose job changed as it was to be stopped does not move in that tick"
                assert step.move.placements[-1].region == "europe-west4"
            run = run.moved(
                step.move.state,
                NOW,
                step.move.reason,
                queue_position=step.move.queue_position,
                **({"job": step.move.job} if step.move.job is not None else {}),
                **({"inputs": step.move.inputs} if step.move.inputs is not None else {}),
                **({"promotion": step.move.promotion} if step.move.promotion is not None else {}),
                **({"attempts": step.move.attempts} if step.move.attempts is not None else {}),
                **({"placements": step.move.placements} if step.move.placements is not None else {}),
            )
        elif step.action is A.SETTLE:
            assert run.state.terminal
            run = run.model_copy(update={"settled": True})
        elif step.action is A.FINGERPRINT:
            assert run.state == S.RECEIVED and run.nightly, "only a new nightly is fingerprinted"
            facts = facts.learned(inputs=SAME if unchanged else CHANGED)
        elif step.action is A.CONCLUDE:
            assert run.state == S.SUCCEEDED
            facts = facts.learned(promotion=VERDICT)
        elif step.action is A.ADMIT:
            assert not run.nightly or run.inputs is not None, "a nightly is fingerprinted before it asks for nodes"
            facts = facts.learned(admission=IN if admitted else WAIT)
        elif step.action is A.ENSURE_CLUSTER:
            assert facts.admission is not None and facts.admission.admitted, (
                "nodes are held before the cluster is touched"
            )
            facts = facts.learned(cluster=cluster)
        elif step.action is A.SUBMIT:
            facts = facts.learned(**({"submit_error": "HTTP 422"} if submit_fails else {"submitted": "applied"}))
        elif step.action is A.OBSERVE_JOB:
            facts = facts.learned(job=JobSeen(job, lost=LOST if lost_nodes else (), bound=bound))
        elif step.action is A.STOP_JOB:
            facts = facts.learned(job_stopped=True)
        elif step.action is A.STOP_WAITING_JOB:
            assert moving, "only a run that may move stops its job to move"
            changed = {"move_refused": "its job is RUNNING now", "job": None} if refused else {"job_stopped": True}
            facts = facts.learned(**changed)
        elif step.action is A.SCALE_DOWN:
            assert run.state.terminal
            facts = facts.learned(scaled=True)
    else:
        pytest.fail(f"no end after 16 steps: {actions}")
    if state.terminal:
        assert run.state == state  # an ended run never moves again
    if run.state.terminal:
        assert run.settled, "whoever ends a run also publishes its end"
    if A.SETTLE in actions and run.reached_cluster:
        assert actions.index(A.SCALE_DOWN) < actions.index(A.SETTLE), "its workers are released before it settles"
