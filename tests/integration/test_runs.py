"""Run records on fake-gcs-server: compare-and-swap for real (generation preconditions, HTTP 412)."""

import datetime as dt
import threading

import pytest

from functions.adapters.gcs import Bucket
from functions.adapters.store import RunStore
from functions.core.errors import Contended, is_transient
from functions.core.runs import InvalidTransition, State
from tests.builders import make_run

NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


@pytest.fixture
def store(bucket):
    return RunStore(Bucket(bucket))


def test_create_is_first_writer_wins(store):
    first, created = store.create(make_run().obj())
    again, created_again = store.create(make_run(state=State.REJECTED).obj())
    assert created and not created_again
    assert again.state == State.RECEIVED and again.generation == first.generation


def test_stale_write_is_refused(store):
    from functions.core.errors import Conflict

    stored, _ = store.create(make_run().obj())
    store.put(stored.moved(State.PROVISIONING, NOW))
    with pytest.raises(Conflict):
        store.put(stored.moved(State.SUBMITTED, NOW))  # written from the old generation


def test_concurrent_updates_all_land(store):
    store.create(make_run().obj())
    store.update("run-1", lambda r: r.model_copy(update={"errors": []}))

    def add(i):
        store.update("run-1", lambda r: r.model_copy(update={"errors": [*r.errors, f"e{i}"]}), attempts=50)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(store.get("run-1").errors) == sorted(f"e{i}" for i in range(8))


def test_contention_is_transient_not_a_failure(store, monkeypatch):
    store.create(make_run().obj())
    with pytest.raises(Contended) as err:
        # Every attempt sees a change made in between: simulate by bumping the record inside `change`.
        store.update("run-1", lambda r: (store.put(r.model_copy(update={"errors": ["x"]})), r)[1], attempts=3)
    assert is_transient(err.value)


class CountedReads(Bucket):
    reads = 0

    def read(self, path, *, limit=None):
        self.reads += 1
        return super().read(path, limit=limit)


def test_an_update_from_the_record_as_last_written_reads_nothing(bucket):
    store = RunStore(CountedReads(bucket))
    created, _ = store.create(make_run().obj())
    moved = store.update("run-1", lambda r: r.moved(State.PROVISIONING, NOW), known=created)
    assert store.blobs.reads == 0
    assert moved.state == State.PROVISIONING and store.get("run-1").generation == moved.generation


def test_an_update_from_a_stale_copy_is_made_again_on_the_stored_record(bucket):
    store = RunStore(CountedReads(bucket))
    stale, _ = store.create(make_run().obj())
    store.update("run-1", lambda r: r.model_copy(update={"errors": ["another handler's"]}))
    moved = store.update("run-1", lambda r: r.moved(State.PROVISIONING, NOW), known=stale)
    stored = store.get("run-1")
    assert stored.state == State.PROVISIONING and stored.errors == ["another handler's"]  # nothing lost
    assert moved.generation == stored.generation
    # A "no change" said on a stale copy is not trusted either: the stored record decides.
    kept = store.update(
        "run-1", lambda r: None if r.state == State.RECEIVED else r.moved(State.SUBMITTED, NOW), known=stale
    )
    assert kept.state == State.SUBMITTED and store.get("run-1").state == State.SUBMITTED


def test_state_machine_refuses_illegal_moves():
    with pytest.raises(InvalidTransition):
        make_run(state=State.SUCCEEDED).obj().moved(State.RUNNING, NOW)
    with pytest.raises(InvalidTransition):
        make_run(state=State.RECEIVED).obj().moved(State.RUNNING, NOW)
    moved = make_run().history().obj().moved(State.SUBMITTED, NOW, "applied").moved(State.RUNNING, NOW)
    assert [t.state for t in moved.history] == [State.SUBMITTED, State.RUNNING] and moved.reason is None


def test_active_markers_list_live_runs(store):
    for run_id in ("a-1", "b-1"):
        store.mark_active(run_id)
        store.create(make_run(run_id).obj())
    store.mark_active("a-1")  # idempotent
    assert [r.run_id for r in store.active()] == ["a-1", "b-1"]
    store.unmark_active("a-1")
    assert [r.run_id for r in store.active()] == ["b-1"]


def test_a_listing_says_when_each_object_was_made_as_the_client_library_reads_it(bucket):
    """Bucket.listing reads timeCreated itself (the library's strptime was a tenth of a quiet tick): the same
    instant as the library's Blob.time_created, for the emulator's microseconds and GCS's milliseconds."""
    from google.cloud.storage import Blob

    from functions.adapters import gcs

    store = Bucket(bucket)
    store.write("runs/active/made", b"", if_generation_match=0)
    [listed] = store.listing("runs/active/")
    [blob] = gcs.storage_client().list_blobs(bucket, prefix="runs/active/")
    assert listed.created == blob.time_created and listed.created.tzinfo is not None
    for stamp in ("2026-12-05T23:31:08Z", "2026-12-05T23:31:08.071Z", "2026-12-05T23:31:08.071066Z"):
        made = Blob.from_string(f"gs://{bucket}/x")
        made._set_properties({"name": "x", "timeCreated": stamp})
        assert gcs._created(made) == made.time_created, stamp
