"""The allocation of one RayCluster's worker group, pure: admission in FIFO order under the node limit,
release of ended runs, the fenced size to write, and idle teardown; then a property over any sequence
of admissions, releases and stale writers."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.core.allocation import Allocation, GroupSeen, admit, idle_expired, release, sizing
from functions.core.config import ClusterSpec

pytestmark = pytest.mark.unit
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


@pytest.mark.parametrize(
    ("wanted", "seen", "launching", "target"),
    [
        (2, None, True, 2),  # no RayCluster: the launch creates it
        (0, None, False, None),  # the watcher never creates one
        (2, GroupSeen(0, 0), True, 2),
        (2, GroupSeen(4, 0), True, 4),  # never a partial shrink (KubeRay would remove random workers)
        (2, GroupSeen(4, 0), False, 4),  # the watcher neither, while anyone holds nodes
        (0, GroupSeen(4, 0), False, 0),  # nobody holds any: all go
        (2, GroupSeen(2, 3), False, None),  # already at this version
        (0, GroupSeen(2, 9), False, None),  # a newer allocation was applied: the stale writer loses
        (2, GroupSeen(2, 1), True, 2),  # same size, older stamp: stamped again
    ],
)
def test_sizing(wanted, seen, launching, target):
    holders = {"a": wanted} if wanted else {}
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
def test_the_group_always_covers_every_holder_and_never_exceeds_the_limit(ops):
    """Drive the allocation and a RayCluster (replicas, stamp) with admissions, ends, and writers that read
    the allocation earlier: the group never has fewer nodes than the holders need after a sync, stale
    writers never take it back, and the limit holds."""
    alloc = Allocation(cluster=SPEC)
    ended: set[str] = set()
    group = GroupSeen(0, 0)
    history: list[Allocation] = [alloc]
    covered: dict[str, int] = {}  # holders the group was last sized for by the newest allocation

    def write(a: Allocation, launching: bool) -> None:
        nonlocal group, covered
        target = sizing(a, group, launching)
        if target is not None:
            group = GroupSeen(target, a.version)
            if a.version == alloc.version:
                covered = dict(a.holders)

    for op, n, nodes in ops:
        run_id = f"r{n}"
        if op == "admit" and run_id not in ended:
            new, outcome = admit(alloc, run_id, nodes, at(n), SPEC, 1800)
            alloc = new or alloc
            if outcome.admitted:
                write(alloc, launching=True)
                assert group.replicas >= alloc.wanted, "an admitted run's launch sees its nodes"
        elif op == "end":
            ended.add(run_id)
            alloc = release(alloc, lambda r: r not in ended, at(100)) or alloc
            write(alloc, launching=False)
            assert group.replicas >= alloc.wanted, "the watcher never shrinks under what live runs hold"
            assert alloc.holders or group.replicas == 0, "no worker stays once nobody holds one"
        else:
            write(history[n % len(history)], launching=False)  # a watcher that read the allocation long ago
        history.append(alloc)
        assert alloc.wanted <= SPEC.max_worker_nodes
        assert group.replicas >= sum(v for k, v in covered.items() if k not in ended), (
            "a stale writer shrank a live run"
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
    assert sizing(alloc, GroupSeen(5, 41), launching=False) == 5  # never shrinks a live run's group
    assert rebuilt(SPEC, [], stamp=0, now=at(9)).idle_since == at(9)
    assert key_path(spec_of(key_path(SPEC))) == key_path(SPEC)
