"""The Kubernetes fake's event recorder plays client-go's (tools/record/events_cache.go): 25 Events per source and
object, then one every 5 minutes; the 10th distinct message of one reason within 10 minutes is combined."""

from __future__ import annotations

import datetime as dt

from tests.fakes.event_recorder import COMBINED, EventRecorder

CLUSTER = {"kind": "RayCluster", "namespace": "ns", "name": "c", "uid": "u", "apiVersion": "ray.io/v1"}


def recorder():
    now = [dt.datetime(2026, 12, 6, tzinfo=dt.UTC)]
    written: dict[str, dict] = {}
    rec = EventRecorder("raycluster-controller", lambda: now[0], written.__setitem__)
    return rec, now, written


def test_the_spam_filter_lets_25_through_then_one_every_5_minutes():
    rec, now, _ = recorder()
    kept = [rec.record(CLUSTER, "CreatedWorkerPod", f"Created worker Pod ns/c-w-{n}") for n in range(30)]
    assert sum(e is not None for e in kept) == 25 and rec.dropped == 5
    other = {**CLUSTER, "name": "d", "uid": "v"}
    assert rec.record(other, "CreatedWorkerPod", "Created worker Pod ns/d-w-0") is not None  # its own budget
    now[0] += dt.timedelta(seconds=299)
    assert rec.record(CLUSTER, "DeletedWorkerPod", "Deleted worker Pod ns/c-w-1; Pod status: Failed") is None
    now[0] += dt.timedelta(seconds=2)
    assert rec.record(CLUSTER, "DeletedWorkerPod", "Deleted worker Pod ns/c-w-2; Pod status: Failed") is not None
    assert rec.record(CLUSTER, "DeletedWorkerPod", "Deleted worker Pod ns/c-w-3; Pod status: Failed") is None


def test_the_tenth_similar_message_is_combined_into_one_event_that_counts_up():
    rec, now, written = recorder()
    for n in range(9):
        assert (
            rec.record(CLUSTER, "DeletedWorkerPod", f"Deleted Pod ns/c-w-{n}")["message"] == f"Deleted Pod ns/c-w-{n}"
        )
        now[0] += dt.timedelta(seconds=1)
    tenth = rec.record(CLUSTER, "DeletedWorkerPod", "Deleted Pod ns/c-w-9")
    eleventh = rec.record(CLUSTER, "DeletedWorkerPod", "Deleted Pod ns/c-w-10")
    assert tenth["message"] == COMBINED + "Deleted Pod ns/c-w-9"
    assert eleventh["metadata"]["name"] == tenth["metadata"]["name"] and eleventh["count"] == 2
    assert written[tenth["metadata"]["name"]]["message"] == COMBINED + "Deleted Pod ns/c-w-10"  # the newest
    assert len(written) == 10
