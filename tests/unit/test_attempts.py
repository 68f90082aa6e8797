"""Attempts: a job lost with its nodes is submitted again, resuming from the run's checkpoints, up to
scaling.max_attempts, after a backoff; a training failure is not; every attempt's GPU time counts."""

from __future__ import annotations

import datetime as dt

import pytest

from functions.core import disruption
from functions.core.decide import Action, Facts, JobSeen, Rules, decide, retry_backoff
from functions.core.runs import Attempt, State
from tests.unit.test_decide import CONFIG, IN, LOST, NOW, READY, ago, record

GPU = {**CONFIG, "scaling": {"nodes": 2, "gpus_per_node": 8, "max_attempts": 3}}
FAILED_JOB = {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "message": "Job entrypoint command failed"}


def second_attempt(submitted: float | None, not_before: float | None = None, held_since: float = 200) -> Attempt:
    return Attempt(
        number=2,
        job="run-1-2",
        requested_at=ago(held_since),
        by="lost nodes",
        not_before=None if not_before is None else ago(-not_before),
        held_since=ago(held_since),
        submitted_at=None if submitted is None else ago(submitted),
    )


FIRST = Attempt(
    number=1,
    job="run-1",
    requested_at=ago(1000),
    by="upload",
    held_since=ago(900),
    submitted_at=ago(900),
    ended_at=ago(200),
    outcome="lost its nodes",
    lost=list(LOST),
    gpu_node_seconds=1400.0,
)


def test_a_job_that_lost_its_nodes_is_queued_as_the_next_attempt_with_a_backoff():
    run = record(State.RUNNING, submitted=100, config=GPU)
    step = decide(run, Facts(now=NOW, job=JobSeen(FAILED_JOB, lost=LOST)))
    assert (step.action, step.move.state) == (Action.MOVE, State.QUEUED)
    assert "attempt 1 of 3 lost its nodes: pod w-1 on node gke-a4-1" in step.move.reason
    assert "attempt 2 in 60s, from the run's last checkpoint if it saved one" in step.move.reason
    first, second = step.move.attempts
    assert (first.number, first.job, first.ended_at, first.lost) == (1, "run-1", NOW, list(LOST))
    assert first.gpu_node_seconds == 200.0  # 100 s x 2 nodes
    assert (second.number, second.job, second.not_before, second.held_since) == (
        2,
        "run-1-2",
        NOW + dt.timedelta(seconds=60),
        NOW,  # the group keeps its nodes between attempts
    )
    assert step.move.gpu_node_seconds == 200.0 and not step.move.collect_result


def test_rays_own_word_that_a_node_died_is_enough():
    job = {**FAILED_JOB, "message": "ray.exceptions.NodeDiedError: The node with node id 4c1 has died: preempted"}
    step = decide(record(State.RUNNING, submitted=100, config=GPU), Facts(now=NOW, job=JobSeen(job)))
    assert step.move.state == State.QUEUED and "Ray: ...ray.exceptions.NodeDiedError" in step.move.reason


def test_a_training_failure_is_not_retried():
    job = {**FAILED_JOB, "message": "ValueError: column 'image' holds no images"}
    step = decide(record(State.RUNNING, submitted=100, config=GPU), Facts(now=NOW, job=JobSeen(job)))
    assert step.move.state == State.FAILED and step.move.attempts is None and step.move.gpu_node_seconds == 200.0


def test_a_vanished_job_whose_pods_were_preempted_is_retried_too():
    step = decide(record(State.SUBMITTED, submitted=100, config=GPU), Facts(now=NOW, job=JobSeen(None, lost=LOST)))
    assert step.move.state == State.QUEUED


def test_the_last_attempt_lost_fails_the_run_naming_what_took_its_nodes_and_counts_all_gpu_time():
    run = record(State.RUNNING, submitted=100, config=GPU, attempts=[FIRST, second_attempt(submitted=100)])
    limited = run.model_copy(update={"config": {**GPU, "scaling": {**GPU["scaling"], "max_attempts": 2}}})
    step = decide(limited, Facts(now=NOW, job=JobSeen(FAILED_JOB, lost=LOST)))
    assert step.move.state == State.FAILED and "no attempts left (scaling.max_attempts 2)" in step.move.reason
    assert "attempt 2 of 2 lost its nodes" in step.move.reason
    assert step.move.attempts[-1].ended_at == NOW and step.move.attempts[-1].lost == list(LOST)
    # attempt 1's 1400 + attempt 2's 200 s x 2 nodes since its nodes were kept (not just since it was submitted)
    assert step.move.attempts[-1].gpu_node_seconds == 400.0 and step.move.gpu_node_seconds == 1800.0


@pytest.mark.parametrize(("wait", "action"), [(30, Action.NOTHING), (-1, Action.ADMIT)])
def test_the_next_attempt_waits_out_its_backoff_then_asks_for_its_nodes(wait, action):
    run = record(State.QUEUED, age=1000, config=GPU, attempts=[FIRST, second_attempt(None, not_before=wait)])
    assert decide(run, Facts(now=NOW)).action == action


def test_the_resubmission_is_written_on_its_attempt():
    run = record(State.QUEUED, age=1000, config=GPU, attempts=[FIRST, second_attempt(None, not_before=-1)])
    step = decide(run, Facts(now=NOW, admission=IN, cluster=READY, submitted="RayJob run-1-2"))
    assert (step.action, step.move.state) == (Action.MOVE, State.SUBMITTED)
    assert step.move.attempts[-1].submitted_at == NOW and step.move.attempts[-1].held_since == ago(200)


def test_queue_and_pending_deadlines_count_from_the_attempts_request():
    # created 1000 s ago, far past the pending deadline (600 s): the new attempt has its own
    run = record(State.QUEUED, age=5000, config=GPU, attempts=[FIRST, second_attempt(None, not_before=-1)])
    assert decide(run, Facts(now=NOW)).action == Action.ADMIT


def test_cancelled_in_its_backoff_counts_the_held_nodes():
    run = record(State.QUEUED, cancel=True, config=GPU, attempts=[FIRST, second_attempt(None, not_before=30)])
    step = decide(run, Facts(now=NOW))
    assert step.move.state == State.CANCELLED and step.move.gpu_node_seconds == 1800.0
    assert step.move.attempts[-1].outcome.startswith("CANCELLED")


def test_a_succeeded_second_attempt_closes_it():
    run = record(State.RUNNING, submitted=100, config=GPU, attempts=[FIRST, second_attempt(submitted=100)])
    step = decide(run, Facts(now=NOW, job=JobSeen({"jobStatus": "SUCCEEDED"})))
    assert step.move.state == State.SUCCEEDED and step.move.collect_result
    assert step.move.attempts[-1].outcome == "SUCCEEDED: succeeded" and step.move.gpu_node_seconds == 1800.0


@pytest.mark.parametrize(("attempt", "seconds"), [(2, 60), (3, 120), (4, 240), (9, 900)])
def test_backoff_doubles_and_is_bounded(attempt, seconds):
    assert retry_backoff(attempt) == seconds


SINCE = dt.datetime(2026, 12, 2, 11, 0, tzinfo=dt.UTC)


def pod(name, conditions=(), phase="Running", reason=None, message=None):
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": f"node-{name}"},
        "status": {"phase": phase, "conditions": list(conditions), "reason": reason, "message": message},
    }


def test_kubernetes_disruption_conditions_and_events_name_the_pod_node_and_time():
    preempted = pod(
        "c-run-x-worker-a",
        [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Pod was terminated in response to imminent node shutdown.",
                "lastTransitionTime": "2026-12-02T11:30:00Z",
            }
        ],
        phase="Failed",
        reason="Terminated",
    )
    old_condition = pod(
        "c-run-x-worker-b",
        [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "lastTransitionTime": "2026-12-02T10:00:00Z",
            }
        ],
    )
    shut_down = pod("c-run-x-worker-c", phase="Failed", reason="NodeShutdown", message="Node is shutting down")
    crashed = pod("c-run-x-worker-d", phase="Failed", reason="Error")
    gone_pod_event = {
        "involvedObject": {"kind": "Pod", "name": "c-run-x-worker-e"},
        "reason": "TaintManagerEviction",
        "message": "Marking for deletion Pod default/c-run-x-worker-e",
        "lastTimestamp": "2026-12-02T11:31:00Z",
    }
    noise = {"involvedObject": {"kind": "Pod", "name": "c-run-x-worker-a"}, "reason": "Pulled", "message": "pulled"}
    lines = disruption.from_pods([preempted, old_condition, shut_down, crashed], [gone_pod_event, noise], SINCE)
    assert lines == [
        "pod c-run-x-worker-a on node node-c-run-x-worker-a at 2026-12-02 11:30:00Z: TerminationByKubelet "
        "(Pod was terminated in response to imminent node shutdown.)",
        "pod c-run-x-worker-c on node node-c-run-x-worker-c: NodeShutdown (Node is shutting down)",
        "pod c-run-x-worker-e on its node at 2026-12-02 11:31:00Z: TaintManagerEviction "
        "(Marking for deletion Pod default/c-run-x-worker-e)",
    ]


def test_kuberay_deleting_a_failed_worker_of_the_group_is_a_lost_node():
    """What outlives a pod the real operator replaced: its Event on the RayCluster. Scale-downs ("Deleted Pod"),
    other groups' pods, events before the attempt and out-of-memory kills are not lost nodes."""

    def event(message: str, at: str = "2026-12-02T11:31:00Z", kind: str = "RayCluster") -> dict:
        return {
            "involvedObject": {"kind": kind, "name": "c"},
            "reason": "DeletedWorkerPod",
            "message": message,
            "lastTimestamp": at,
        }

    failed = "Deleted worker Pod default/c-run-x-worker-a; Pod status: Failed; Pod restart policy: Never; {}"
    events = [
        event(failed.format("Ray container terminated status: &ContainerStateTerminated{ExitCode:143,Reason:Error}")),
        event("Deleted Pod default/c-run-x-worker-b"),  # a scale-down
        event(failed.replace("run-x", "run-y").format("")),  # another run's group
        event(failed.format(""), at="2026-12-02T10:00:00Z"),  # before the attempt
        event(failed.format("&ContainerStateTerminated{ExitCode:137,Reason:OOMKilled}")),  # the run's own memory
        event(failed.format(""), kind="Pod"),
    ]
    assert disruption.from_kuberay(events, "run-x", SINCE) == [
        "pod c-run-x-worker-a on its node at 2026-12-02 11:31:00Z: failed, and KubeRay deleted it (DeletedWorkerPod)"
    ]


def node(
    uid: str = "u1", boot: str = "b1", ready: str = "True", taints: list | None = None, at: str | None = None, **said
) -> dict:
    condition = {"type": "Ready", "status": ready, "lastTransitionTime": at or "2026-12-02T11:00:00Z", **said}
    return {
        "metadata": {"name": "n-1", "uid": uid},
        "spec": {"taints": taints or [], **({"unschedulable": True} if taints else {})},
        "status": {"nodeInfo": {"bootID": boot}, "conditions": [condition]},
    }


ENDED = dt.datetime(2026, 12, 2, 11, 45, tzinfo=dt.UTC)  # the failed job's endTime
CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2026-12-02T11:40:00Z"}
SPOT_NOTICE = {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}


# What takes a node from a run, what Kubernetes then shows of the node the run was seen on, and whether the job's
# failure is a lost node (another attempt) or the run's own (node_changes; the pods' own conditions and Events are
# from_pods', tested above, and Ray's word from_ray's).
NODE_CAUSES = [
    # Spot preemption: GKE's termination notice starts the kubelet's graceful shutdown, the node turns NotReady
    (
        "Spot preemption, the node still listed",
        node(ready="False", reason="KubeletNotReady", message="node is shutting down", at="2026-12-02T11:44:30Z"),
        True,
    ),
    ("Spot preemption, the node deleted since", None, True),
    ("a managed instance group recreating the VM under its name", node(uid="u2", boot="b9"), True),
    ("the same VM booted again (a preempted Spot VM restarted)", node(boot="b2"), True),
    ("node auto-repair: a kubelet that stopped posting", node(ready="Unknown", at="2026-12-02T11:44:00Z"), True),
    ("a GKE upgrade's drain, then the node made again", node(uid="u3", boot="b3"), True),
    ("a cordon alone (an upgrade's first step; the pods run on)", node(taints=[CORDON]), False),
    ("a Spot termination notice's taint with the pods intact", node(taints=[SPOT_NOTICE]), False),
    (
        "NotReady only after the job had failed",
        node(ready="False", reason="KubeletNotReady", at="2026-12-02T11:50:00Z"),
        False,
    ),
    ("a kubelet that reports no boot id (unknown, not a new boot)", node(boot=""), False),
    ("the same node as recorded", node(), False),
]


@pytest.mark.parametrize(("cause", "now", "lost"), NODE_CAUSES, ids=[c[0] for c in NODE_CAUSES])
def test_a_node_lost_what_the_run_ran_only_when_its_loss_came_before_the_jobs_end(cause, now, lost):
    """A job that failed with its own error keeps its verdict whatever happens to its node afterwards (issue 63):
    a cordon, a taint or a NotReady after the job's end take nothing; a node gone, made again, booted again or not
    Ready before the job ended lost what it ran."""
    was = disruption.identity(node())
    assert was == "u1/b1"
    assert bool(disruption.node_changes({"n-1": was}, {"n-1": now}, ENDED)) == lost, cause


def test_what_a_lost_node_says():
    def changes(now: dict | None, recorded: str = "u1/b1") -> list[str]:
        return disruption.node_changes({"n-1": recorded}, {"n-1": now}, ENDED)

    assert changes(None) == ["node n-1: gone from the cluster (its VM was deleted or preempted)"]
    assert changes(node(uid="u2", boot="b9")) == [
        "node n-1: deleted and made again under its name since the run ran there (its VM was recreated)"
    ]
    assert changes(node(boot="b2")) == [
        "node n-1: booted again since the run ran there (boot b1 then b2: its VM was preempted or recreated)"
    ]
    shutting = node(ready="False", reason="KubeletNotReady", message="node is shutting down")
    assert changes(shutting) == [
        "node n-1: not Ready (KubeletNotReady node is shutting down) since 2026-12-02 11:00:00Z"
    ]
    assert changes(node(uid="u2", boot="b2"), recorded="") == []  # an older release's record: no identity to compare
    assert changes(node(boot=""), recorded="u1/") == []  # a kubelet that reports no boot: only the uid tells
    # Without the job's end time, a node not Ready when the failure is read lost what it ran (as before)
    assert disruption.node_changes({"n-1": "u1/b1"}, {"n-1": shutting}) != []


def test_pod_level_disruptions_where_the_node_stays_are_lost_nodes_from_their_events():
    """Where the node stays and KubeRay deletes the disrupted pod at once (its DisruptionTarget condition with it),
    the Event Kubernetes recorded on the pod still says so: the scheduler's preemption, the kubelet's node-pressure
    eviction, a taint manager's eviction. An API eviction (a drain) leaves its condition on the pod while it stands."""

    def pod_event(reason: str, message: str) -> dict:
        return {
            "involvedObject": {"kind": "Pod", "name": "c-run-x-worker-a"},
            "reason": reason,
            "message": message,
            "lastTimestamp": "2026-12-02T11:31:00Z",
        }

    for reason, message in [
        ("Preempted", "Preempted by pod 5f3c on node n-1"),
        ("Evicted", "The node was low on resource: memory."),
        ("TaintManagerEviction", "Marking for deletion Pod default/c-run-x-worker-a"),
    ]:
        assert disruption.from_pods([], [pod_event(reason, message)], SINCE), reason
    drained = pod(
        "c-run-x-worker-a",
        [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "lastTransitionTime": "2026-12-02T11:30:00Z",
            }
        ],
    )
    assert disruption.from_pods([drained], [], SINCE)
    assert disruption.from_pods([], [pod_event("Killing", "Stopping container ray-worker")], SINCE) == []


@pytest.mark.parametrize(
    ("message", "lost"),
    [
        ("ray.exceptions.ActorDiedError: The actor died because its node has died. Node Id: 5a", True),
        ("The node with node id: 5a and address: 10.0.0.3 and node name: 10.0.0.3 has been marked dead", True),
        ("Traceback ... torch.OutOfMemoryError: CUDA out of memory", False),
        ("ValueError: 'dict' object has no attribute 'convert'", False),
    ],
)
def test_rays_message_tells_node_loss_from_a_training_error(message, lost):
    assert bool(disruption.from_ray({"message": message})) == lost


def test_the_pending_deadline_is_the_longest_of_the_capacity_options():
    from functions.core.decide import pending_seconds

    capacity = [{"kind": "flex-start", "pending_seconds": 4 * 3600}, {"kind": "on-demand"}]
    waiting = record(
        State.SUBMITTED, submitted=3 * 3600, config={**GPU, "scaling": {**GPU["scaling"], "capacity": capacity}}
    )
    assert pending_seconds(waiting.run_config()) == 4 * 3600
    step = decide(
        waiting,
        Facts(now=NOW, job=JobSeen({"jobStatus": "PENDING"}, stuck="pod w: FailedScaleUp: GCE out of resources")),
    )
    assert step.move is None or step.move.state != State.FAILED  # 3 h of 4 h: still waiting
    late = record(State.SUBMITTED, submitted=5 * 3600, config=waiting.config)
    failed = decide(
        late,
        Facts(
            now=NOW,
            job=JobSeen({"jobStatus": "PENDING"}, stuck="pod w: FailedScaleUp: GCE out of resources"),
            job_stopped=True,
        ),
    )
    assert failed.move is not None and failed.move.state == State.FAILED
    assert "deadlines.pending_seconds 14400" in failed.move.reason
    assert "FailedScaleUp: GCE out of resources" in failed.move.reason


@pytest.mark.parametrize(
    ("message", "kind", "retried"),
    [
        ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co')", "nightly", True),
        ("huggingface_hub.errors.HfHubHTTPError: 503 Service Unavailable", "nightly", True),
        ("trainer.preflight.PreflightError: model google/x is gated: ConnectionError", "nightly", False),
        ("ValueError: no image in row 3", "nightly", False),
        ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co')", "upload", False),
    ],
)
def test_a_nightly_that_failed_for_a_cause_that_may_pass_gets_another_attempt(message, kind, retried):
    """The scheduler's id for a night is the same all day: one passing outage must not lose the night."""
    run = record(State.RUNNING, submitted=100, config=GPU, kind=kind)
    step = decide(run, Facts(now=NOW, job=JobSeen({**FAILED_JOB, "message": message})))
    assert (step.move.state == State.QUEUED) == retried, step.move.reason
    if retried:
        assert "attempt 1 of 3 failed for a cause that may pass" in step.move.reason
        assert step.move.attempts[1].by == "transient failure" and step.move.attempts[0].outcome.startswith("failed: ")


def test_the_deployments_backoff_is_the_first_wait():
    """RAYTUNE_RETRY_BACKOFF_S (a local run: 2 s, its lost node is a process, not a reclaimed VM) starts the doubling."""
    assert [retry_backoff(attempt, first=2) for attempt in (2, 3, 4)] == [2, 4, 8]
    run = record(State.RUNNING, submitted=100, config=GPU)
    step = decide(run, Facts(now=NOW, job=JobSeen(FAILED_JOB, lost=LOST)), Rules(retry_backoff_s=2))
    assert (
        step.move.state == State.QUEUED and "in 2s, from the run's last checkpoint if it saved one" in step.move.reason
    )
    assert step.move.attempts[-1].not_before == NOW + dt.timedelta(seconds=2)
