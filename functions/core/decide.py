"""Every decision about a run, in one pure function: `decide(record, facts, rules) -> Step`.

Handlers gather facts and execute steps, nothing else (functions/handlers/steps.py):

    step = decide(record, facts, rules)
    until step is NOTHING: execute it, add what it showed to the facts (or take the record it wrote),
                           decide again

Facts start with the clock and who is asking; each executed step adds one observation (the cluster's
readiness, the submission's outcome, the RayJob's status, that the job was stopped or the group
scaled). Rules are the deployment's (the retry backoff, the wait in one region, whether the tick releases
nodes itself), bound once per handler from its settings. So the whole state machine, deadlines, claims and cancels included, lives here and is
tested as a table (tests/unit/test_decide.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import Any, Literal

from functions.core import disruption, joblog, regions
from functions.core.allocation import Admission
from functions.core.champion import Promotion
from functions.core.config import RunConfig
from functions.core.fingerprint import Inputs
from functions.core.platform import ClusterReadiness, NodeSeen
from functions.core.regions import Placement
from functions.core.runs import RESUMES, Attempt, RunRecord, State

# A RECEIVED run belongs to the handler that created it for this long; after that, it died mid-way
# and a redelivery or the watcher takes the run over.
CLAIM_SECONDS = 120
JOB_TERMINAL = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
DEPLOYMENT_TERMINAL = frozenset({"Complete", "Failed", "ValidationFailed"})
WAITING = frozenset({None, "", "PENDING"})
JOB_SUMMARY_KEYS = ("jobStatus", "jobDeploymentStatus", "reason", "message", "startTime", "endTime", "failed")
# Before attempt N (N >= 2) after lost nodes: 60 s, then 120 s, ..., at most 15 minutes. Spot capacity that was
# just reclaimed rarely comes back at once; a flex-start request waits in GKE's queue anyway.
RETRY_BACKOFF_SECONDS = (60, 900)


def retry_backoff(attempt: int, first: int = RETRY_BACKOFF_SECONDS[0]) -> int:
    """The wait before `attempt` (2 is the first retry): `first`, doubling, at most RETRY_BACKOFF_SECONDS[1]."""
    return int(min(RETRY_BACKOFF_SECONDS[1], first * 2 ** max(0, attempt - 2)))


class Action(enum.Enum):
    FINGERPRINT = "fingerprint"  # a nightly: version its inputs and read the last successful nightly's
    ADMIT = "admit"  # hold the run's worker nodes in its RayCluster's allocation, or queue it (FIFO)
    ENSURE_CLUSTER = "ensure_cluster"  # look at the run's cluster; create or repair it, never wait for it
    SUBMIT = "submit"  # size the RayCluster to its allocation (never shrinking it), then apply the RayJob
    OBSERVE_JOB = "observe_job"  # read the RayJob's status
    ASK_STATUS = "ask_status"  # ask KubeRay to look at a RayCluster whose status lags its pods (kuberay_lag.py)
    STOP_JOB = "stop_job"  # stop the Ray job (delete the RayJob; KubeRay stops the job)
    # Before a move: stop the job only if it still waits as read right then, its pods unbound (a precondition on the
    # RayJob as read): one that got its nodes meanwhile is never stopped for a move.
    STOP_WAITING_JOB = "stop_waiting_job"
    MOVE = "move"  # write a transition, or new details in the same state, to the record
    SCALE_DOWN = "scale_down"  # release the run's nodes; size its RayCluster to what live runs still hold
    CONCLUDE = "conclude"  # a succeeded run: its evaluated adapter meets the champion; a nightly's inputs are kept
    SETTLE = "settle"  # publish the run-finished event and stop watching the run
    NOTHING = "nothing"  # nothing to do for this run now


@dataclasses.dataclass(frozen=True)
class Move:
    """A transition to write, or new details in the same state, with what the record keeps of it."""

    state: State
    reason: str | None = None  # why (None keeps the current reason when the state stays)
    job: dict[str, Any] | None = None  # the RayJob status summary to keep
    collect_result: bool = False  # read the trainer's result.json into the record first
    gpu_node_seconds: float | None = None  # what the ending run held, from submission to release
    queue_position: int | None = None  # to QUEUED: its place in line
    inputs: Inputs | None = None  # a nightly's fingerprinted inputs
    promotion: Promotion | None = None  # what the run did to its champion
    attempts: list[Attempt] | None = None  # the run's attempts as they now stand
    nodes: dict[str, NodeSeen] | None = None  # the current attempt's nodes: their capacity and identity
    placements: list[Placement] | None = None  # the run moved to another region: where it waited and where it goes


def with_result_read(move: Move, unreadable: str | None) -> Move:
    """A move that read the trainer's result.json, once read: a job that succeeded but whose result could not be
    read (too large, not a result) ends FAILED saying so, never SUCCEEDED with no adapter and no reason."""
    if unreadable is None or move.state != State.SUCCEEDED:
        return move
    return dataclasses.replace(
        move, state=State.FAILED, reason=f"the job succeeded but its result is unreadable: {unreadable}"
    )


@dataclasses.dataclass(frozen=True)
class Step:
    action: Action
    move: Move | None = None  # MOVE's transition; every other action carries nothing


NOTHING = Step(Action.NOTHING)


@dataclasses.dataclass(frozen=True)
class JobSeen:
    """What OBSERVE_JOB showed of the run's RayJob."""

    status: dict[str, Any] | None  # its status; None: the RayJob is gone
    lost: tuple[str, ...] = ()  # a failed or vanished job: what took its nodes
    nodes: dict[str, NodeSeen] | None = None  # a running job: its nodes, while not all are known
    stuck: str | None = None  # a waiting job: why, from its own pods and their Events (when known)
    bound: bool = False  # a waiting job: a worker pod of its run is bound to a node (its capacity came)
    lag: str | None = None  # a job KubeRay holds for its RayCluster's state: why that state lags its pods


@dataclasses.dataclass(frozen=True)
class Run:
    """A live run as one decision reads it: its record, and the config it runs under where it is now, read once
    (RunRecord.run_config: the accepted config placed in its current region)."""

    record: RunRecord
    cfg: RunConfig

    @property
    def pending_s(self) -> int:
        return pending_seconds(self.cfg)


@dataclasses.dataclass(frozen=True)
class Rules:
    """The deployment's rules a decision follows: bound once per handler from its settings, never observed."""

    retry_backoff_s: int = RETRY_BACKOFF_SECONDS[0]  # the first backoff before a run's next attempt
    region_seconds: int = regions.DEFAULT_REGION_SECONDS  # the operator's wait for capacity in one region
    tick_releases: bool = False  # the watch tick releases ended runs' nodes once per RayCluster, then settles them


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the deciding handler observed: when it looks, which handler it is and whether it made the record;
    every other field is what an executed step showed (None or False until that step ran)."""

    now: dt.datetime
    handler: Literal["launch", "watch"] = "watch"
    created: bool = False  # this handler created the record, so it holds the RECEIVED claim
    inputs: Inputs | None = None  # after FINGERPRINT
    admission: Admission | None = None  # after ADMIT
    cluster: ClusterReadiness | None = None  # after ENSURE_CLUSTER
    submitted: str | None = None  # after SUBMIT: what was applied
    submit_error: str | None = None  # ENSURE_CLUSTER or SUBMIT failed for good
    job: JobSeen | None = None  # after OBSERVE_JOB
    cluster_gone: str | None = None  # after OBSERVE_JOB: the run's GKE cluster does not exist
    job_stopped: bool = False  # after STOP_JOB or STOP_WAITING_JOB
    move_refused: str | None = None  # after STOP_WAITING_JOB: why the job was not stopped (it started or changed)
    status_asked: str | None = None  # after ASK_STATUS: what became of the request
    scaled: bool = False  # after SCALE_DOWN
    promotion: Promotion | None = None  # after CONCLUDE
    error: str | None = None  # a permanent controller error while handling the run

    def learned(self, **observed: Any) -> Facts:
        return dataclasses.replace(self, **observed)


def move(state: State, reason: str | None = None, **details: Any) -> Step:
    return Step(Action.MOVE, Move(state, reason, **details))


def decide(record: RunRecord, facts: Facts, rules: Rules = Rules()) -> Step:
    if record.state.terminal:
        return _after_end(record, facts, rules)
    if facts.error:
        return move(State.FAILED, f"controller error: {facts.error}")
    if record.state in (State.RECEIVED, State.QUEUED, State.PROVISIONING):
        return _before_submission(Run(record, record.run_config()), facts)
    return _submitted(Run(record, record.run_config()), facts, rules)


def _after_end(record: RunRecord, facts: Facts, rules: Rules) -> Step:
    # This handler touched the cluster while another ended the run (a cancel or a deadline during the
    # apply), or its submission failed after the RayCluster apply: stop what it started, release the workers.
    touched = facts.submitted is not None or facts.submit_error is not None
    if facts.submitted is not None and not facts.job_stopped:
        return Step(Action.STOP_JOB)
    releasing = touched or (record.may_hold_nodes and not record.settled)
    if releasing and not facts.scaled:
        # Never settled (its end published, its record no longer watched) before its nodes are released.
        return NOTHING if rules.tick_releases else Step(Action.SCALE_DOWN)
    if record.settled:
        return NOTHING
    if needs_conclusion(record):
        if facts.promotion is None:
            return Step(Action.CONCLUDE)
        return move(record.state, promotion=facts.promotion)
    return Step(Action.SETTLE)


def needs_conclusion(record: RunRecord) -> bool:
    """A succeeded run that evaluated its adapter (champion or not) or a nightly (its inputs are the next
    nightly's baseline), not yet concluded."""
    if record.state != State.SUCCEEDED or record.promotion is not None:
        return False
    return bool(record.run_config().evaluation.samples) or record.nightly


def claim_expired(record: RunRecord, now: dt.datetime) -> bool:
    return (now - record.updated_at).total_seconds() > CLAIM_SECONDS


def pending_seconds(cfg: RunConfig) -> int:
    """How long the run may wait for its nodes: deadlines.pending_seconds, or longer where an option of its
    capacity list allows more (a flex-start request waits in GKE's queue)."""
    options = cfg.scaling.capacity or []
    return max([cfg.deadlines.pending_seconds, *(o.pending_seconds for o in options if o.pending_seconds)])


def _missed_deadline(run: Run, now: dt.datetime) -> str | None:
    """Waiting in line counts against deadlines.queue_seconds from arrival; getting the cluster ready and
    submitting counts against deadlines.pending_seconds from arrival or from leaving the queue."""
    record = run.record
    moved = _moved_in(record)
    if moved is not None:
        limit = run.pending_s
        waited = (now - moved).total_seconds()
        if waited > limit:
            return f"not submitted in {record.region} within deadlines.pending_seconds ({limit}s) of its move there"
        return None
    if record.state == State.QUEUED:
        limit = run.cfg.deadlines.queue_seconds
        waited = (now - record.arrived).total_seconds()
        if waited > limit:
            return (
                f"still queued (position {record.queue_position}) after {int(waited)}s "
                f"(deadlines.queue_seconds {limit}): {record.reason}"
            )
        return None
    limit = run.pending_s
    left_queue = record.left(State.QUEUED)
    if (now - max(left_queue or record.arrived, record.arrived)).total_seconds() > limit:
        return f"not submitted within deadlines.pending_seconds ({limit}s)"
    return None


def _moved_in(record: RunRecord) -> dt.datetime | None:
    """When a run that moved to another region and is not waiting in line there (its place is held: it waits for
    the region's cluster and its submission) arrived there; its wait counts against its pending deadline from then,
    as a submitted run's wait for nodes does in each region, whatever that region's API answers meanwhile."""
    if record.state != State.QUEUED or record.queue_position is not None or not record.placements:
        return None
    entered, arrived = record.entered(State.QUEUED), record.placements[-1].since
    return arrived if entered is not None and arrived >= entered else None


def _before_submission(run: Run, facts: Facts) -> Step:
    """RECEIVED belongs to the handler that created it until its claim expires; QUEUED and PROVISIONING
    to the watcher (a duplicate launch delivery leaves them alone)."""
    record = run.record
    if (
        record.state == State.RECEIVED
        and not facts.created
        and not record.claim_released
        and not claim_expired(record, facts.now)
    ):
        return NOTHING  # its launch handler is still at work
    if record.state != State.RECEIVED and facts.handler == "launch":
        return NOTHING
    if record.cancel_requested:
        return _end(run, facts, State.CANCELLED, f"{record.cancel_why}, before submission")
    if missed := _missed_deadline(run, facts.now):
        return _end(run, facts, State.FAILED, missed)
    waiting = record.current.not_before
    if waiting is not None and facts.now < waiting:
        return NOTHING  # an attempt after lost nodes backs off first
    if record.nightly and record.state == State.RECEIVED and record.inputs is None:
        return _fingerprinted(record, facts)
    if facts.submit_error:
        return _end(run, facts, State.FAILED, f"cannot submit: {facts.submit_error}")
    if facts.admission is None:
        return Step(Action.ADMIT)
    if not facts.admission.admitted:
        reason = facts.admission.describe(run.cfg.group_nodes)
        if record.state == State.QUEUED and record.reason == reason:
            return NOTHING
        return move(State.QUEUED, reason, queue_position=facts.admission.position)
    if facts.cluster is None:
        return Step(Action.ENSURE_CLUSTER)
    if facts.cluster.state == "error":
        return _end(run, facts, State.FAILED, facts.cluster.message)
    if facts.cluster.state == "provisioning":
        if record.state == State.PROVISIONING and record.reason == facts.cluster.message:
            return NOTHING
        return move(State.PROVISIONING, facts.cluster.message)
    if facts.submitted is None:
        return Step(Action.SUBMIT)
    submitted_reason = facts.submitted + facts.admission.passed_note
    if record.attempts:  # a later attempt: its submission is written on it (a first's is its history's)
        current = record.current
        submitted = current.model_copy(
            update={"submitted_at": facts.now, "held_since": current.held_since or facts.now}
        )
        return move(State.SUBMITTED, submitted_reason, attempts=[*record.attempts[:-1], submitted])
    return move(State.SUBMITTED, submitted_reason)


def _fingerprinted(record: RunRecord, facts: Facts) -> Step:
    """A nightly trains only on change: the same config, code and dataset as the last successful nightly
    of its config name end it SKIPPED, before it asks for nodes."""
    if facts.inputs is None:
        return Step(Action.FINGERPRINT)
    inputs = facts.inputs
    if inputs.unchanged_since:
        what = (
            f"{inputs.unchanged_since} is still training the same inputs"
            if inputs.in_flight
            else f"nothing new since {inputs.unchanged_since}"
        )
        return move(
            State.SKIPPED,
            f"{what}: the same config, trainer code and dataset "
            f"({inputs.dataset_objects} data objects, fingerprint {(inputs.fingerprint or '')[:12]})",
            inputs=inputs,
        )
    return move(record.state, inputs=inputs)


def _submitted(run: Run, facts: Facts, rules: Rules) -> Step:
    """SUBMITTED and RUNNING runs are the watcher's to follow."""
    record = run.record
    if facts.handler == "launch":
        return NOTHING
    if record.cancel_requested:
        if not facts.job_stopped:
            return Step(Action.STOP_JOB)
        return _end(run, facts, State.CANCELLED, record.cancel_why, collect_result=True)
    if facts.cluster_gone:
        return _cluster_gone(run, facts)
    seen = facts.job
    if seen is None:
        return Step(Action.OBSERVE_JOB)
    job = seen.status
    if (elsewhere := _move_region(run, facts, rules, seen)) is not None:
        return elsewhere
    if seen.lag and facts.status_asked is None:
        return Step(Action.ASK_STATUS)
    why = seen.stuck or (f"{seen.lag}: {facts.status_asked}" if seen.lag else None)
    state, reason = job_outcome(record, job, facts.now, run.pending_s, why)
    summary = job_summary(job)
    if not state.terminal:
        known = record.seen_nodes
        # A node keeps the identity it had when first seen under the run (a later read may be of its successor);
        # one recorded without (an older release's record) takes the one read now.
        nodes = {**(seen.nodes or {}), **{n: s for n, s in known.items() if s.identity or n not in (seen.nodes or {})}}
        if (
            state == record.state
            and summary == record.job
            and (reason is None or reason == record.reason)
            and nodes == known
        ):
            return NOTHING
        return move(state, reason, job=summary, nodes=nodes if nodes != known else None)
    if job is not None and job.get("jobStatus") not in JOB_TERMINAL and not facts.job_stopped:
        return Step(Action.STOP_JOB)  # a stuck or half-failed job must not hold the GPUs
    lost = [*seen.lost, *disruption.from_ray(job)] if state == State.FAILED else []
    if lost:
        return _lost_nodes(run, facts, rules, reason, lost, summary)
    if state == State.FAILED and record.nightly and joblog.transient_cause(reason):
        # A nightly's day has one run id: a passing outage (the Hub, GCS, a 503) must not lose the night.
        return _again(
            run,
            facts,
            rules,
            f"failed for a cause that may pass: {reason}",
            f"failed: {reason}",
            [],
            summary,
            "transient failure",
        )
    return _end(run, facts, state, reason, job=summary, collect_result=True)


def _move_region(run: Run, facts: Facts, rules: Rules, seen: JobSeen) -> Step | None:
    """A submitted run whose job still waits for its nodes longer than it may wait in one region moves to the next
    of its regions (regions.next_region): its job there is stopped first, then the record moves it (the tick's
    housekeeping releases its group in the region it left), and it is applied there as the same attempt, queued for
    that region's RayCluster. In its last region, or with nothing else to try, the pending deadline ends it."""
    record, cfg, status = run.record, run.cfg, seen.status
    entered = record.entered(State.SUBMITTED)
    if record.state != State.SUBMITTED or status is None or entered is None:
        return None
    if (status.get("jobStatus") or None) not in WAITING:
        return None
    here = cfg.cluster.region
    tried = {p.region for p in record.placements if p.attempt == record.attempt}
    after = regions.next_region(record.accepted_config(), here, tried)
    waited = int((facts.now - entered).total_seconds())
    bound = regions.wait_bound(cfg, rules.region_seconds, run.pending_s)
    if after is None or waited <= bound or seen.bound or facts.move_refused:
        return None  # a run whose nodes came, or whose job changed as it was to be stopped, stays
    if not facts.job_stopped:
        return Step(Action.STOP_WAITING_JOB)  # it must not take nodes there later
    why = f"waited {waited}s for capacity in {here} (at most {bound}s in one region)" + (
        f": {seen.stuck}" if seen.stuck else ""
    )
    placements = regions.moved_on(record.placements, here, entered, record.attempt, after, facts.now, why)
    # The same attempt, applied afresh there: nothing was held where it never got its nodes.
    attempts = (
        [*record.attempts[:-1], record.current.model_copy(update={"submitted_at": None, "held_since": None})]
        if record.attempts
        else None
    )
    return move(
        State.QUEUED,
        f"moves to {after}: {why}",
        job=job_summary(status),
        placements=placements,
        attempts=attempts,
        nodes={},
    )


def _lost_nodes(
    run: Run, facts: Facts, rules: Rules, reason: str | None, lost: list[str], summary: dict[str, Any] | None
) -> Step:
    """A job that failed because it lost its nodes (not because training failed) is submitted again as the
    next attempt, which resumes from the run's last checkpoint (Ray Train restores the run of the same name
    from its storage), after a backoff, while scaling.max_attempts allows; the run keeps its worker group."""
    more = f" (+{len(lost) - 1} more)" if len(lost) > 1 else ""
    return _again(
        run,
        facts,
        rules,
        f"lost its nodes: {lost[0]}{more}",
        f"lost its nodes: {reason or 'the job failed'}",
        lost,
        summary,
        "lost nodes",
    )


def _again(
    run: Run,
    facts: Facts,
    rules: Rules,
    why: str,
    outcome: str,
    lost: list[str],
    summary: dict[str, Any] | None,
    by: str,
) -> Step:
    """The next attempt after a failure that may pass (`why`), bounded by scaling.max_attempts, after a backoff."""
    record, limit = run.record, run.cfg.scaling.max_attempts
    number = record.attempt
    why = f"attempt {number} of {limit} {why}"
    if number >= limit:
        return _end(
            run,
            facts,
            State.FAILED,
            f"{why}; no attempts left (scaling.max_attempts {limit})",
            lost=lost,
            job=summary,
            collect_result=True,
        )
    backoff = retry_backoff(number + 1, rules.retry_backoff_s)
    now = facts.now
    attempts = [
        *record.closed_attempts(now, outcome, lost, _held_now(run, now)),
        record.next_attempt(now, by, now + dt.timedelta(seconds=backoff), keeps_nodes=True),
    ]
    return move(
        State.QUEUED,
        f"{why}; attempt {number + 1} in {backoff}s, {RESUMES}",
        job=summary,
        attempts=attempts,
        nodes={},
        gpu_node_seconds=held(run, now),
    )


def _end(
    run: Run, facts: Facts, state: State, reason: str | None, lost: list[str] | None = None, **details: Any
) -> Step:
    """A move to a terminal state; a run that reached its cluster counts its GPU time over all its attempts,
    and one with attempts has the last one closed."""
    record = run.record
    if record.submitted_at is None and not record.attempts:
        return move(state, reason, **details)
    now = facts.now
    attempts = (
        record.closed_attempts(now, f"{state.value}: {reason or state.value.lower()}", lost or [], _held_now(run, now))
        if record.attempts
        else None
    )
    return move(state, reason, attempts=attempts, gpu_node_seconds=held(run, now), **details)


def _cluster_gone(run: Run, facts: Facts) -> Step:
    """A submitted run whose GKE cluster is gone says so at once, and FAILS when it stays gone past
    deadlines.pending_seconds (counted from when it was first seen gone: a cluster recreated in time lets the
    next tick find the job, or its absence, again)."""
    record = run.record
    gone = f"{facts.cluster_gone}: its RayJob cannot be followed"
    if record.reason != gone:
        return move(record.state, gone)
    waited = (facts.now - record.updated_at).total_seconds()
    limit = run.pending_s
    if waited <= limit:
        return NOTHING
    return _end(
        run,
        facts,
        State.FAILED,
        f"{gone}, for {int(waited)}s (deadlines.pending_seconds {limit})",
        collect_result=True,
    )


def held(run: Run, now: dt.datetime) -> float:
    """GPU node-seconds the run held over all its attempts: each attempt's nodes from its submission (or, kept
    from the attempt before, from that one's end) until its end or now (0 on CPU)."""
    return round(run.record.earlier_gpu_node_seconds + _held_now(run, now), 1)


def _held_now(run: Run, now: dt.datetime) -> float:
    """GPU node-seconds of the current attempt so far."""
    record, cfg = run.record, run.cfg
    if not cfg.scaling.use_gpu:
        return 0.0
    since = record.current.held_since or record.submitted_at
    if since is None:
        return 0.0
    return round(max(0.0, (now - since).total_seconds()) * cfg.group_nodes, 1)


def job_outcome(
    record: RunRecord, status: dict[str, Any] | None, now: dt.datetime, pending: int, stuck: str | None = None
) -> tuple[State, str | None]:
    """What a RayJob status means for the run: its state and why.

    KubeRay bugs handled: jobStatus can stay RUNNING while jobDeploymentStatus is Failed, and jobs can
    hang in Initializing/PENDING: either terminal field ends the run, and waiting has a deadline.
    """
    if status is None:
        return State.FAILED, "the RayJob disappeared before it finished"
    job = status.get("jobStatus") or None
    deployment = status.get("jobDeploymentStatus") or None
    detail = "; ".join(str(status[k]) for k in ("reason", "message") if status.get(k)) or None
    if job == "SUCCEEDED":
        return State.SUCCEEDED, detail
    if job == "STOPPED":
        if record.cancel_requested:
            return State.CANCELLED, record.cancel_why
        return State.FAILED, detail or "the Ray job was stopped"
    if job == "FAILED" or deployment in DEPLOYMENT_TERMINAL:
        return State.FAILED, detail or f"jobStatus {job}, jobDeploymentStatus {deployment}"
    if job == "RUNNING":
        return State.RUNNING, None
    waited = (now - (record.entered(State.SUBMITTED) or record.created_at)).total_seconds()
    if job in WAITING and waited > pending:
        return State.FAILED, (
            f"{_waiting_for(deployment)} after {int(waited)}s (deadlines.pending_seconds {pending})"
            + (f": {stuck}" if stuck else "")
        )
    return record.state, stuck if job in WAITING else None


def _waiting_for(deployment: str | None) -> str:
    """What a RayJob that has not started waits for, in words: KubeRay says deployment `Running` as soon as it
    has submitted to a RayCluster named by clusterSelector, while the Ray job itself is still PENDING."""
    if deployment == "Running":
        return (
            "the Ray job never started (jobStatus PENDING while KubeRay's deployment is Running: the head's "
            "dashboard or its worker pods were not ready)"
        )
    return f"still {deployment or 'pending'}"


def job_summary(status: dict[str, Any] | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {k: status[k] for k in JOB_SUMMARY_KEYS if status.get(k) is not None}


def cluster_key(cfg: RunConfig) -> tuple[str, str, str, str]:
    c = cfg.cluster
    return (c.region, c.gke_cluster, c.namespace, c.ray_cluster)
