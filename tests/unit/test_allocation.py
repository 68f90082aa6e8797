"""The allocation of one RayCluster's worker group, pure: admission in FIFO order under the node limit,
release of ended runs, the fenced size to write, and idle teardown; then a property over any sequence
of admissions, releases and stale writers."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.core.allocation import (
    LEGACY_GROUP,
    Allocation,
    admit,
    adoptable,
    foreign,
    group_name,
    idle_expired,
    release,
    sizing,
)
from functions.core.config import ClusterSpec
from functions.core.kuberay_lag import GroupPods
from functions.core.platform import Workers

pytestmark = pytest.mark.unit


def view(groups: dict[str, int], stamp: int, drained: frozenset[str] = frozenset()) -> Workers:
    """A RayCluster's worker groups as the platform reads them (no handle: nothing is written here)."""
    return Workers(groups, stamp, handle=None, drained=drained)


T0 = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
SPEC = ClusterSpec(max_worker_nodes=5)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def admitted(alloc: Allocation, run_id: str, nodes: int, arrived: float) -> tuple[Allocation, bool, int | None]:
    new, outcome = admit(alloc, run_id, nodes, at(arrived), SPEC, 1800)
    return new or alloc, outcome.admitted, outcome.position


def test_runs_are_admitted_while_they_fit_then_queue_first_in_first_out():
    alloc = Allocation(cluster=SPEC)
    alloc, ok, _ = admitted(alloc, "a", 2, 0)
    alloc, ok2, _ = admitted(alloc, "b", 2, 1)
    assert ok and ok2 and alloc.wanted == 4
    alloc, ok, position = admitted(alloc, "c", 2, 2)
    assert not ok and position == 1
    alloc, ok, position = admitted(alloc, "d", 1, 3)  # would fit, but c is first in line
    assert not ok and position == 2
    alloc = release(alloc, lambda r: r != "a", at(10)) or alloc
    alloc, ok, _ = admitted(alloc, "d", 1, 3)
    assert not ok  # still behind c
    alloc, ok, _ = admitted(alloc, "c", 2, 2)
    assert ok and alloc.holders == {"b": 2, "c": 2} and [w.run_id for w in alloc.queue] == ["d"]
    alloc, ok, _ = admitted(alloc, "d", 1, 3)
    assert ok and alloc.wanted == 5


def test_admission_is_idempotent_and_versions_only_move_on_change():
    alloc, _, _ = admitted(Allocation(cluster=SPEC), "a", 2, 0)
    again, outcome = admit(alloc, "a", 2, at(0), SPEC, 1800)
    assert again is None and outcome.admitted
    assert release(alloc, lambda r: True, at(1)) is None


def test_a_newcomer_cannot_raise_the_operators_cap_and_may_ask_for_less():
    """The issue's escape: the limit came from the newcomer's own cluster.max_worker_nodes, so a run declaring
    64 was admitted beside runs admitted under 5 and the group reached 14."""
    alloc = Allocation(cluster=SPEC, holders={"a": 3, "b": 2})
    greedy = ClusterSpec(max_worker_nodes=64)
    new, outcome = admit(alloc, "greedy", 9, at(5), greedy, 1800, operator_limit=5)
    assert not outcome.admitted and outcome.limit == 5 and (new or alloc).wanted == 5
    modest = ClusterSpec(max_worker_nodes=2)
    new, outcome = admit(Allocation(cluster=SPEC, holders={"a": 1}), "modest", 2, at(5), modest, 1800, 5)
    assert not outcome.admitted and outcome.limit == 2  # it asked for at most 2 nodes in the group


def test_an_early_arrival_that_queues_late_goes_first():
    alloc = Allocation(cluster=SPEC, holders={"x": 5})
    alloc, _, _ = admitted(alloc, "late", 1, 20)
    alloc, _, position = admitted(alloc, "early", 1, 10)
    assert position == 1 and [w.run_id for w in alloc.queue] == ["early", "late"]


def test_a_run_this_release_cannot_serve_does_not_hold_the_line():
    """Issue 39: a newer release's record at the head of the queue blocked every run behind it (one waited with
    5 nodes free and FAILED at its queue deadline). It keeps its place; the run behind it is served as if it
    were not there, and its reason names whom it passed."""
    alloc, _, _ = admitted(Allocation(cluster=SPEC, holders={"x": 4}), "newer", 2, 0)  # waits for x's nodes
    alloc = release(alloc, lambda r: r != "x", at(5)) or alloc
    before, outcome = admit(alloc, "b", 2, at(10), SPEC, 1800)
    assert not outcome.admitted and outcome.position == 2, "before: b waits behind a run nobody will admit"
    unserved = {"newer": "a newer release's record (format 4)"}
    new, outcome = admit(before or alloc, "b", 2, at(10), SPEC, 1800, unserved=unserved)
    assert outcome.admitted and new is not None and new.holders == {"b": 2}
    assert [w.run_id for w in new.queue] == ["newer"], "it keeps its place for the release that serves it"
    assert outcome.describe(2).endswith("passed: newer (a newer release's record (format 4))")
    # Behind it and not fitting: the position counts only the runs this release serves.
    _, outcome = admit(new, "c", 4, at(20), SPEC, 1800, unserved=unserved)
    assert not outcome.admitted and (outcome.position, outcome.queued) == (1, 1) and outcome.passed


A, B = group_name("a"), group_name("b")


@pytest.mark.parametrize(
    ("holders", "seen", "launching", "target"),
    [
        ({"a": 2}, None, "a", {A: 2}),  # no RayCluster: the launch creates it, with its run's group
        ({"a": 2}, None, None, None),  # the watcher never creates one
        ({"a": 2}, None, "b", None),  # nor a launch whose run is not admitted
        ({"a": 2, "b": 1}, view({A: 2}, 0), "b", {A: 2, B: 1}),  # a launch adds its own group
        ({"a": 2, "b": 1}, view({A: 2}, 0), None, {A: 2}),  # the watcher cannot render b's: b's launch adds it
        ({"b": 1}, view({A: 2, B: 1}, 0), None, {A: 0, B: 1}),  # a ended: exactly its nodes go
        ({"b": 1}, view({A: 0, B: 1}, 0, frozenset({A})), None, {B: 1}),  # drained: out of the spec
        ({"b": 1}, view({A: 0, B: 1}, 0), None, {A: 0, B: 1}),  # its pods not gone yet: kept at zero
        ({}, view({A: 2}, 0), None, {A: 0}),  # nobody holds any: all go
        ({"a": 2}, view({A: 2}, 3), None, None),  # already at this version
        ({}, view({A: 2}, 9), None, None),  # a newer allocation was applied: the stale writer loses
        ({"a": 2}, view({A: 2}, 1), "a", {A: 2}),  # same size, older stamp: stamped again
        # The previous release's one shared group keeps its size while a run admitted under it holds nodes.
        ({"a": 2, "b": 1}, view({LEGACY_GROUP: 3}, 0), "b", {LEGACY_GROUP: 3, B: 1}),
        ({"b": 1}, view({LEGACY_GROUP: 3, B: 1}, 0), None, {LEGACY_GROUP: 0, B: 1}),
    ],
)
def test_sizing(holders, seen, launching, target):
    assert sizing(Allocation(cluster=SPEC, holders=holders, version=3), seen, launching) == target


def test_idle_teardown_waits_for_the_configured_time():
    alloc, _, _ = admitted(Allocation(cluster=SPEC), "a", 2, 0)
    idle = release(alloc, lambda r: False, at(100))
    assert idle is not None and idle.idle_since == at(100)
    assert not idle_expired(idle, at(1899)) and idle_expired(idle, at(1900))
    assert not idle_expired(idle.model_copy(update={"idle_delete_seconds": 0}), at(10**6))
    assert not idle_expired(idle.model_copy(update={"deleted": True}), at(10**6))


OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "end", "stale_write"]), st.integers(0, 7), st.integers(1, 5)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_each_live_run_keeps_its_nodes_and_an_ended_run_releases_exactly_its_own(ops):
    """Drive the allocation and a RayCluster (groups, stamp) with admissions, ends, and writers that read the
    allocation earlier: after a sync each holder's group has its nodes, an ended run's group is at zero (its
    nodes released exactly, in the same sync), stale writers never take a live run's nodes, and the limit
    holds."""
    alloc = Allocation(cluster=SPEC)
    ended: set[str] = set()
    seen = view({}, 0)
    history: list[Allocation] = [alloc]

    def write(a: Allocation, launching: str | None) -> None:
        nonlocal seen
        target = sizing(a, seen, launching)
        if target is not None:
            seen = view(target, a.version, frozenset(g for g, n in target.items() if n == 0))

    def live_groups_hold_their_nodes() -> None:
        for run_id, nodes in alloc.holders.items():
            assert seen.groups.get(group_name(run_id), nodes) == nodes, f"{run_id}'s group changed under it"

    for op, n, nodes in ops:
        run_id = f"r{n}"
        if op == "admit" and run_id not in ended:
            new, outcome = admit(alloc, run_id, nodes, at(n), SPEC, 1800)
            alloc = new or alloc
            if outcome.admitted:
                write(alloc, launching=run_id)
                assert seen.groups[group_name(run_id)] == alloc.holders[run_id], "its launch sees its nodes"
        elif op == "end":
            ended.add(run_id)
            alloc = release(alloc, lambda r: r not in ended, at(100)) or alloc
            write(alloc, launching=None)
            assert seen.groups.get(group_name(run_id), 0) == 0, "an ended run's nodes go in the same sync"
        else:
            write(history[n % len(history)], launching=None)  # a watcher that read the allocation long ago
        history.append(alloc)
        live_groups_hold_their_nodes()
        assert alloc.wanted <= SPEC.max_worker_nodes
        assert seen.replicas <= SPEC.max_worker_nodes + sum(seen.groups.get(group_name(r), 0) for r in ended), (
            "beyond the limit only groups on their way to zero"
        )


def test_an_allocation_is_rebuilt_from_the_live_runs_above_the_rayclusters_stamp():
    from functions.core.allocation import LiveRun, key_path, rebuilt, spec_of

    live = [
        LiveRun("b", 2, at(5), admitted=False),
        LiveRun("a", 3, at(0), admitted=True),
        LiveRun("c", 1, at(1), False),
    ]
    alloc = rebuilt(SPEC, live, stamp=41, now=at(9))
    assert alloc.holders == {"a": 3} and [w.run_id for w in alloc.queue] == ["c", "b"] and alloc.version == 42
    seen = view({group_name("a"): 3, LEGACY_GROUP: 2}, 41)
    assert sizing(alloc, seen, launching=None) == {group_name("a"): 3, LEGACY_GROUP: 0}  # a's group kept
    assert rebuilt(SPEC, [], stamp=0, now=at(9)).idle_since == at(9)
    assert key_path(spec_of(key_path(SPEC))) == key_path(SPEC)


def unlabelled(groups: dict[str, int], runs: dict[str, str] | None = None, stamp: int = 0) -> Workers:
    """A RayCluster made before deployments were labelled (managed-by raytune only)."""
    return Workers(groups, stamp, handle=None, labelled=False, runs=runs or {})


def test_groups_no_record_accounts_for_are_never_resized_removed_or_adopted():
    """Issue 39: a RayCluster made by a deployment that predates the deployment label, with a running worker
    group, was adopted by the first launch of this release and its running group removed."""
    fresh = Allocation(cluster=SPEC, holders={"new": 2}, version=1)  # this deployment's first admission there
    theirs = unlabelled({LEGACY_GROUP: 3, group_name("other"): 2}, runs={group_name("other"): "other"})
    nobody = allocation_foreign(fresh, theirs, "new", recorded=set())
    assert nobody == {LEGACY_GROUP: 3, group_name("other"): 2}
    assert sizing(fresh, theirs, None, nobody) is None, "the watcher leaves them (no stamp either)"
    assert sizing(fresh, theirs, "new", nobody) == {**theirs.groups, group_name("new"): 2}
    assert not adoptable(theirs, nobody)
    # Before: the same launch sized their running groups to zero.
    assert sizing(fresh, theirs, "new") == {LEGACY_GROUP: 0, group_name("other"): 0, group_name("new"): 2}


def test_a_pre_label_raycluster_is_adopted_while_its_groups_are_accounted_for():
    # This deployment's own earlier release: a run admitted under the shared group holds its nodes.
    alloc = Allocation(cluster=SPEC, holders={"a": 2}, version=7)
    ours = unlabelled({LEGACY_GROUP: 2}, stamp=7)
    assert allocation_foreign(alloc, ours, None, recorded=set()) == {}
    assert adoptable(ours, {}) and sizing(alloc, ours, None, {}) == {LEGACY_GROUP: 2}, "labelled, sizes kept"
    # A per-run group whose pod template names a run this deployment has a record of is accounted for.
    ended = unlabelled({group_name("done"): 1}, runs={group_name("done"): "done"}, stamp=7)
    assert allocation_foreign(alloc, ended, None, recorded={"done"}) == {}
    # A template label that names a run whose group this is not (a copied group) accounts for nothing.
    copied = unlabelled({group_name("x"): 1}, runs={group_name("x"): "done"}, stamp=7)
    assert allocation_foreign(alloc, copied, None, recorded={"done"}) == {group_name("x"): 1}
    # Once labelled: its groups of this deployment's form are its own; a group made by hand is not.
    labelled = view({LEGACY_GROUP: 2, group_name("b"): 1, "cpu-group": 1}, 7)
    assert allocation_foreign(Allocation(cluster=SPEC, version=7), labelled, None, recorded=set()) == {"cpu-group": 1}
    assert sizing(Allocation(cluster=SPEC, version=7), labelled, None, {"cpu-group": 1}) == {
        LEGACY_GROUP: 0,
        group_name("b"): 0,
        "cpu-group": 1,
    }


def allocation_foreign(alloc: Allocation, seen: Workers, launching: str | None, recorded: set[str]) -> dict[str, int]:
    return foreign(alloc, seen, launching, recorded.__contains__)


def test_a_new_rayclusters_waiting_group_is_held_at_zero_until_kuberay_calls_it_ready():
    """On a RayCluster KubeRay has never called ready, the group of a run that waits for capacity while another
    run's group is ready is written at zero (its pods were waiting anyway), and stays there until KubeRay says
    ready, which it never takes back: then it is sized again (issue 63)."""
    alloc = Allocation(cluster=SPEC, holders={"a": 2, "b": 1}, version=3)
    a, b = group_name("a"), group_name("b")
    pods = {a: GroupPods(pods=2, no_capacity=2), b: GroupPods(pods=1, ready=1)}
    blocked = Workers({a: 2, b: 1}, 3, handle=None, ready=False, head_ready=True, group_pods=pods)
    assert sizing(alloc, blocked, None) == {a: 0, b: 1}
    gone = {b: GroupPods(pods=1, ready=1)}  # KubeRay deleted a's waiting pods
    held = Workers({a: 0, b: 1}, 3, handle=None, ready=False, head_ready=True, group_pods=gone)
    assert sizing(alloc, held, None) is None  # KubeRay has not written `ready` yet
    assert sizing(alloc, held, "a") is None  # a redelivered launch of a does not undo it
    ready = Workers({a: 0, b: 1}, 3, handle=None, ready=True)
    assert sizing(alloc, ready, None) == {a: 2, b: 1}
    unread = Workers({a: 0, b: 1}, 3, handle=None, ready=False)  # no pods read: nothing to judge, nothing held
    assert sizing(alloc, unread, None) == {a: 2, b: 1}
