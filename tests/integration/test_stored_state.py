"""Stored state cannot stop the controller (issue 21): records written by the previous release, records rewritten
or planted in the bucket, oversized objects and a corrupt allocation, through functions-framework on the emulators.
Each case is one record (or object) among healthy runs: the bad one is quarantined or read as it was accepted,
and the tick answers 2xx and goes on for the others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.adapters.store import ACTIVE, RECORD_GENERATION
from functions.core.config import RunConfig
from functions.core.runs import PLAIN_FORMAT, RECORD_FORMAT, State
from tests.fakes.http_events import post, storage_event
from tests.harness import patch_metadata
from tests.integration.test_functions import QUICK, only_record, upload, watch, workers

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"
RUNNING = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}


def launched(h, server, bucket, name="ok"):
    post(server["launch"], storage_event(bucket, f"configs/{name}.json", upload(bucket, f"configs/{name}.json", QUICK)))
    return only_record(h)


def previous_release_record(bucket: str, run_id: str) -> dict:
    """tests/data/records/v1-running.json, written by the previous release's own RunRecord (commit 481a873): a
    RUNNING run whose scaling.node_selector names another accelerator than scaling.accelerator, which that
    release accepted and this one rejects at receipt."""
    record = json.loads((RECORDS / "v1-running.json").read_text())
    record["run_id"] = run_id
    record["config"]["storage_path"] = f"gs://{bucket}/checkpoints"
    return record


def test_a_run_accepted_by_the_previous_release_is_followed_not_failed(controller, functions_server, bucket):
    """Issue 21: after an upgrade, a RUNNING run accepted earlier was FAILED as a "controller error" (and its job
    killed) because today's validation is stricter. Its record is read as format 1, its config by the rules it was
    accepted under, and it runs to the end; new writes carry the current format."""
    h = controller
    record = previous_release_record(bucket, "shop-0123456789")
    assert "format" not in record
    upload(bucket, "runs/shop-0123456789.json", json.dumps(record).encode())
    h.ctx.store.mark_active("shop-0123456789")
    h.kube.put("rayjobs", {"metadata": {"name": "shop-0123456789"}, "status": RUNNING})
    watch(functions_server)
    assert h.ctx.store.get("shop-0123456789").state == State.RUNNING
    assert h.kube.get("rayjobs", "shop-0123456789") is not None, "its job is not touched"
    h.kube.set_status("rayjobs", "shop-0123456789", {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    ended = h.ctx.store.get("shop-0123456789")
    assert ended.state == State.SUCCEEDED and ended.format == PLAIN_FORMAT  # no sweep: as the previous release reads
    assert h.ctx.store.blobs.list("quarantine/") == []


def test_a_record_naming_another_run_is_quarantined_not_launched_under_that_id(controller, functions_server, bucket):
    h = controller
    good = launched(h, functions_server, bucket)
    planted = json.loads(h.ctx.store.blobs.read(f"runs/{good.run_id}.json")[0])
    planted.update(run_id="victim-0123456789", state="RECEIVED", history=[], job=None)
    upload(bucket, "runs/planted-0123456789.json", json.dumps(planted).encode())
    h.ctx.store.mark_active("planted-0123456789")
    h.clock.advance(600)  # past the RECEIVED claim: the watcher would take it over
    h.kube.set_status("rayjobs", good.run_id, RUNNING)
    watch(functions_server)
    assert sorted(h.kube.names("rayjobs")) == [good.run_id], "nothing applied under the inner id"
    assert h.ctx.store.blobs.list("quarantine/runs/") == ["quarantine/runs/planted-0123456789.json"]
    [event] = [e for e in h.finished_events() if e["state"] == "QUARANTINED"]
    assert "names run 'victim-0123456789', not 'planted-0123456789'" in event["reason"]


def test_an_oversized_object_under_runs_is_quarantined_without_reading_it(controller, functions_server, bucket):
    """Issue 21: a 200 MB object under runs/ took the watcher from 127 to 730 MB (its limit is 512 MiB). Reads of
    stored state download at most MAX_STORED_BYTES + 1 bytes, and quarantine copies inside the bucket."""
    import resource

    from functions.adapters.store import MAX_STORED_BYTES

    h = controller
    good = launched(h, functions_server, bucket)
    size = 64 * 1024 * 1024
    upload(bucket, "runs/huge-0123456789.json", b'{"run_id": "huge-0123456789"' + b" " * size + b"}")
    h.ctx.store.mark_active("huge-0123456789")
    h.kube.set_status("rayjobs", good.run_id, RUNNING)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    watch(functions_server)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert h.ctx.store.get(good.run_id).state == State.RUNNING
    from functions.adapters.gcs import storage_client

    kept = storage_client().bucket(bucket).get_blob("quarantine/runs/huge-0123456789.json")
    assert kept is not None and kept.size > size and "runs/huge-0123456789.json" not in h.ctx.store.blobs.list("runs/")
    [event] = [e for e in h.finished_events() if e["state"] == "QUARANTINED"]
    assert f"larger than {MAX_STORED_BYTES} bytes" in event["reason"]
    assert grown_mib < 32, f"the watcher's peak memory grew {grown_mib:.0f} MiB for a {size >> 20} MiB object"


def test_a_config_that_is_not_one_by_any_rules_is_quarantined_and_the_tick_goes_on(
    controller, functions_server, bucket
):
    h = controller
    good = launched(h, functions_server, bucket)
    broken = json.loads(h.ctx.store.blobs.read(f"runs/{good.run_id}.json")[0])
    broken.update(run_id="typed-0123456789", config={**broken["config"], "scaling": {"nodes": "many"}})
    upload(bucket, "runs/typed-0123456789.json", json.dumps(broken).encode())
    h.ctx.store.mark_active("typed-0123456789")
    h.kube.set_status("rayjobs", good.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)  # 2xx, or watch() would raise
    assert h.ctx.store.get(good.run_id).state == State.SUCCEEDED and workers(h)["replicas"] == 0
    assert h.ctx.store.blobs.list("quarantine/runs/") == ["quarantine/runs/typed-0123456789.json"]


def test_a_newer_releases_record_is_left_to_it(controller, functions_server, bucket):
    h = controller
    good = launched(h, functions_server, bucket)
    newer = json.loads(h.ctx.store.blobs.read(f"runs/{good.run_id}.json")[0])
    newer.update(run_id="newer-0123456789", format=RECORD_FORMAT + 1, state="RECEIVED", future_field={"x": 1})
    upload(bucket, "runs/newer-0123456789.json", json.dumps(newer).encode())
    h.ctx.store.mark_active("newer-0123456789")
    h.clock.advance(600)
    watch(functions_server)
    stored = json.loads(h.ctx.store.blobs.read("runs/newer-0123456789.json")[0])
    assert stored["state"] == "RECEIVED" and stored["future_field"] == {"x": 1}, "not rewritten without its fields"
    assert "newer-0123456789" not in h.kube.names("rayjobs") and h.ctx.store.blobs.list("quarantine/") == []
    # Issue 39: an operator's cancel (or a retry) rewrote it as this release's format, dropping future_field.
    for kind in ("cancel", "retry"):
        watch(functions_server, {"kind": kind, "run_id": "newer-0123456789"})
    after = json.loads(h.ctx.store.blobs.read("runs/newer-0123456789.json")[0])
    assert after == stored, "no path of this release downgrades a newer release's record"


def test_no_write_of_this_release_downgrades_a_newer_record(controller, functions_server, bucket):
    from functions.core.errors import NewerRelease

    h = controller
    good = launched(h, functions_server, bucket)
    record = h.ctx.store.get(good.run_id)
    newer = record.model_copy(update={"format": RECORD_FORMAT + 1})
    with pytest.raises(NewerRelease):
        h.ctx.store.put(newer)
    raw = json.loads(h.ctx.store.blobs.read(f"runs/{good.run_id}.json")[0])
    upload(bucket, f"runs/{good.run_id}.json", json.dumps({**raw, "format": RECORD_FORMAT + 1}).encode())
    with pytest.raises(NewerRelease):
        h.ctx.store.update(good.run_id, lambda r: r.model_copy(update={"cancel_requested": True}))
    assert json.loads(h.ctx.store.blobs.read(f"runs/{good.run_id}.json")[0])["format"] == RECORD_FORMAT + 1


def test_a_corrupt_allocation_is_rebuilt_from_the_live_runs_and_the_raycluster(controller, functions_server, bucket):
    """Issue 21: a corrupt clusters/... object failed every run on its RayCluster. It is moved aside and rebuilt:
    the admitted runs hold their nodes, the queued one keeps its turn, the group is not shrunk under them."""
    from functions.core.allocation import key_path

    h = controller
    post(functions_server["launch"], storage_event(bucket, "configs/a.json", upload(bucket, "configs/a.json", QUICK)))
    big = {**QUICK, "scaling": {"nodes": 4}}
    post(functions_server["launch"], storage_event(bucket, "configs/b.json", upload(bucket, "configs/b.json", big)))
    by_state = {r.state: r for r in h.ctx.store.active()}
    holder, waiter = by_state[State.SUBMITTED], by_state[State.QUEUED]
    path = key_path(RunConfig.model_validate(holder.config).cluster)
    upload(bucket, path, b'{"cluster": "garbage"')
    h.kube.set_status("rayjobs", holder.run_id, RUNNING)
    watch(functions_server)
    alloc = h.ctx.allocations.get(RunConfig.model_validate(holder.config).cluster)
    assert alloc.holders == {holder.run_id: 2} and [w.run_id for w in alloc.queue] == [waiter.run_id]
    assert h.ctx.store.get(holder.run_id).state == State.RUNNING and workers(h)["replicas"] == 2
    assert h.ctx.store.get(waiter.run_id).state == State.QUEUED
    assert h.ctx.store.blobs.list("quarantine/clusters/") == ["quarantine/clusters/" + path.removeprefix("clusters/")]
    [event] = h.events_of("allocation-rebuilt")
    assert "rebuilt from 2 live runs" in event["reason"]
    h.kube.set_status("rayjobs", holder.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    assert h.ctx.store.get(waiter.run_id).state == State.SUBMITTED and workers(h)["replicas"] == 4


def test_a_run_whose_gke_cluster_was_deleted_fails_after_the_pending_deadline(controller, functions_server, bucket):
    """Issue 21: a run whose GKE cluster was deleted stayed SUBMITTED forever and every tick answered 500. That the
    cluster is gone is a fact the decision sees: said at once, FAILED after deadlines.pending_seconds, and the
    ticks answer 2xx meanwhile (watch() raises on anything else)."""
    h = controller
    good = launched(h, functions_server, bucket)
    h.kube.set_status("rayjobs", good.run_id, RUNNING)
    watch(functions_server)
    h.gke.clusters.clear()  # deleted in the console
    h.kube.fail("GET", "/rayjobs", 503, times=1000)  # and its API server with it
    watch(functions_server)
    record = h.ctx.store.get(good.run_id)
    assert record.state == State.RUNNING and "does not exist (deleted?): its RayJob cannot be followed" in record.reason
    h.clock.advance(QUICK["deadlines"]["pending_seconds"] + 1)
    watch(functions_server)
    record = h.ctx.store.get(good.run_id)
    assert record.state == State.FAILED and "GKE cluster raytune in us-central1 does not exist" in record.reason
    assert record.settled


def test_a_cancel_or_retry_of_an_unreadable_record_quarantines_it_at_once(controller, functions_server, bucket):
    """Issue 39: a cancel or retry of a run whose record cannot be read answered 500 (and was redelivered) until a
    later tick quarantined it. It is moved aside and reported at once, the delivery answered 200."""
    h = controller
    for n, kind in enumerate(("cancel", "retry")):
        run_id = f"broken{n}-0123456789"
        upload(bucket, f"runs/{run_id}.json", b"{not json")
        watch(functions_server, {"kind": kind, "run_id": run_id})  # 200
        assert f"quarantine/runs/{run_id}.json" in h.ctx.store.blobs.list("quarantine/runs/")
        assert h.ctx.store.get(run_id) is None
        [event] = [e for e in h.finished_events() if e["state"] == "QUARANTINED" and e["run_id"] == run_id]
        assert f"a {kind} for it was refused" in event["reason"]


@pytest.mark.parametrize("kind", ["newer", "unreadable"])
def test_a_run_this_release_cannot_serve_at_the_head_of_the_queue_does_not_block_the_runs_behind_it(
    controller, functions_server, bucket, kind
):
    """Issue 39: a newer release's record at the head of a RayCluster's queue blocked every run behind it (one
    waited with nodes free and FAILED at its queue deadline); so did a record that cannot be read, until a tick
    quarantined it. This release never admits such a run, so it is passed: it keeps its place and its record,
    and the run behind it is submitted with the reason saying so."""
    h = controller
    holder = launched(h, functions_server, bucket, "holder")  # 2 of 5 nodes
    big = {**QUICK, "scaling": {"nodes": 4}}
    post(functions_server["launch"], storage_event(bucket, "configs/big.json", upload(bucket, "configs/big.json", big)))
    [waiter] = [r for r in h.ctx.store.active() if r.state == State.QUEUED]
    raw = json.loads(h.ctx.store.blobs.read(f"runs/{waiter.run_id}.json")[0])
    if kind == "newer":
        written = json.dumps({**raw, "format": RECORD_FORMAT + 1}).encode()
        why = f"a newer release's record (format {RECORD_FORMAT + 1})"
    else:
        written, why = b'{"run_id": "' + waiter.run_id.encode() + b'", "state": ', "its record cannot be read"
    generation = upload(bucket, f"runs/{waiter.run_id}.json", written)
    # as the newer release's write does: its generation noted on the run's marker, so watchers read it again
    patch_metadata(bucket, f"{ACTIVE}{waiter.run_id}", {RECORD_GENERATION: str(generation)})
    h.kube.set_status("rayjobs", holder.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    if kind == "newer":
        watch(functions_server)  # the holder ends; the newer run is left to its release, at the head of the line
    small = {**QUICK, "name": "behind", "scaling": {"nodes": 1}}
    post(functions_server["launch"], storage_event(bucket, "configs/c.json", upload(bucket, "configs/c.json", small)))
    [behind] = [r for r in h.ctx.store.active() if r.config["name"] == "behind"]
    assert behind.state == State.SUBMITTED, behind.reason
    assert f"so passed: {waiter.run_id} ({why}" in behind.reason
    alloc = h.ctx.allocations.get(RunConfig.model_validate(behind.config).cluster)
    assert [w.run_id for w in alloc.queue] == [waiter.run_id] and behind.run_id in alloc.holders
    if kind == "newer":
        stored = json.loads(h.ctx.store.blobs.read(f"runs/{waiter.run_id}.json")[0])
        assert stored["format"] == RECORD_FORMAT + 1 and stored["state"] == "QUEUED", "left to its own release"


def test_unreadable_is_said_by_name_and_a_bugs_value_error_is_not_taken_for_it(controller, bucket, monkeypatch):
    """Issue 41: ValueError meant "stored object unreadable" in one place and "retry refused" in another and was
    caught in 17 places, each of which also swallowed any bug that raised one."""
    from functions.core.errors import RetryRefused, Unreadable
    from functions.handlers import sizing

    h = controller
    upload(bucket, "runs/broken-0123456789.json", b"{not json")
    with pytest.raises(Unreadable):
        h.ctx.store.get("broken-0123456789")
    spec = RunConfig().cluster
    assert sizing.standing(h.ctx, "broken-0123456789", spec).unserved.startswith("its record cannot be read")
    good = json.loads(json.dumps(previous_release_record(bucket, "live-0123456789")))
    upload(bucket, "runs/live-0123456789.json", json.dumps(good).encode())
    with pytest.raises(RetryRefused, match="only a FAILED or CANCELLED run can be retried"):
        h.ctx.store.get("live-0123456789").retried(h.clock(), "raytune retry")

    def buggy(run_id):
        raise ValueError("a bug, not a record")

    monkeypatch.setattr(h.ctx.store, "get", buggy)
    with pytest.raises(ValueError, match="a bug, not a record"):
        sizing.standing(h.ctx, "live-0123456789", spec)  # before: taken for an unreadable record, nodes kept on a guess
