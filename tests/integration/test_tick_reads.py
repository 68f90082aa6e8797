"""What a watch tick and a launch read (issue 25), on fake-gcs-server and the Kubernetes API fake: a quiet tick
lists the active markers and the Ray objects once and reads no record, however many runs are live; a record
another process writes is seen on the next tick through its marker's note; a launch that fits reads no other
run's record."""

from __future__ import annotations

from collections import Counter

import pytest

from functions.adapters.gcs import Bucket
from functions.adapters.gke import GkePlatform
from functions.adapters.kube import Kube, api_client
from functions.adapters.store import ACTIVE, RECORD_GENERATION, RunStore
from functions.core import quiet
from functions.core.allocation import group_name
from functions.core.runs import State
from functions.local.cloudevents import object_finalized
from tests.harness import patch_metadata
from tests.integration.test_functions import QUICK, upload
from tests.integration.test_invariants import launch, tick

RUNNING = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
ROOMY = {**QUICK, "scaling": {"nodes": 1}, "cluster": {"max_worker_nodes": 64}}  # every run fits


@pytest.fixture
def reads(monkeypatch):
    """Every GCS object read of the controller, by path prefix."""
    counted: Counter = Counter()
    counted.paths = []  # every path read, in order
    original = Bucket.read

    def read(self, path, *args, **kwargs):
        counted[path.split("/")[0]] += 1
        counted.paths.append(path)
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(Bucket, "read", read)
    return counted


def running(h, runs):
    """The runs' jobs RUNNING, each worker pod on a node of its own (as the kubelet reports them), and their
    RayClusters called ready (KubeRay's status once their pods ran; never taken back)."""
    for name in h.kube.names("rayclusters"):
        h.kube.set_status("rayclusters", name, {"state": "ready"})
    for run in runs:
        h.kube.set_status("rayjobs", run.run_id, RUNNING)
        node = f"node-{run.run_id}"
        h.kube.put("nodes", {"metadata": {"name": node, "labels": {"cloud.google.com/gke-spot": "true"}}}, "")
        pod = {"metadata": {"name": f"{run.run_id}-w", "labels": {"raytune.dev/run-id": run.run_id}}}
        h.kube.put("pods", {**pod, "spec": {"nodeName": node}, "status": {"phase": "Running"}})
    tick(h)
    tick(h)


def quiet_tick(h, reads) -> tuple[int, Counter]:
    reads.clear()
    before = len(h.kube.requests)
    tick(h)
    kube = Counter(
        (
            method + (" metadata" if "PartialObjectMetadataList" in accepted else ""),
            path.rsplit("/", 1)[-1]
            if path.endswith(("rayjobs", "rayclusters", "pods"))
            else path.split("/")[-2] + " by name",
        )
        for method, path, accepted in h.kube.requests[before:]
    )
    return sum(reads.values()), kube


def test_a_quiet_tick_reads_no_record_and_its_calls_do_not_grow_with_the_runs(controller, bucket, reads):
    h = controller
    runs = [launch(h, bucket, f"quiet-{i}", ROOMY) for i in range(2)]
    running(h, runs)
    few = quiet_tick(h, reads)
    runs += [launch(h, bucket, f"quiet-{i}", ROOMY) for i in range(2, 8)]
    running(h, runs)
    many = quiet_tick(h, reads)
    assert few[0] == many[0] == 0, "no record or allocation is read when none changed"
    # the RayClusters, listed whole before, unchanged since: their metadata alone
    assert many[1][("GET", "rayjobs")] == 1 and many[1][("GET metadata", "rayclusters")] == 1
    # each RayCluster judged from that listing (its stamp is its allocation's version), not read again by name
    assert many[1][("GET", "rayclusters by name")] == many[1][("GET", "rayclusters")] == 0, many[1]
    # a RayCluster KubeRay called ready is taken as ready from that listing: none of its pods is read
    assert many[1][("GET", "pods")] == 0, many[1]
    assert few[1] == many[1], f"the Kubernetes calls grew with the runs: {few[1]} -> {many[1]}"
    assert all(h.ctx.store.get(r.run_id).state == State.RUNNING for r in runs)


def test_a_tick_reads_again_only_the_raycluster_whose_spec_changed(controller, bucket, reads):
    """Two RayClusters, both listed by an earlier tick: a launch onto one changes its spec (its groups), so the
    next tick reads that one by name and takes the other's spec from memory; a fresh instance lists them whole."""
    h = controller
    pools = [{**ROOMY, "cluster": {**ROOMY["cluster"], "ray_cluster": f"pool-{p}"}} for p in "ab"]
    runs = [launch(h, bucket, f"pool-{i}", pools[i]) for i in range(2)]
    running(h, runs)
    assert quiet_tick(h, reads)[1][("GET", "rayclusters by name")] == 0
    runs.append(launch(h, bucket, "pool-a-2", pools[0]))
    calls = quiet_tick(h, reads)[1]
    assert calls[("GET", "rayclusters by name")] == 1 and calls[("GET metadata", "rayclusters")] == 1, calls
    changed = [p for m, p, _ in h.kube.requests if m == "GET" and p.endswith("/rayclusters/pool-a")]
    assert changed, "the changed RayCluster is the one read"
    running(h, runs)
    assert all(h.ctx.store.get(r.run_id).state == State.RUNNING for r in runs)
    # a fresh instance: its API clients, and what they remember, all new
    old = h.ctx.platform
    h.ctx.platform = GkePlatform(
        h.ctx.settings.project, None, old.clusters, lambda _: Kube(api_client(h.kube.url)), old.owner
    )
    fresh = quiet_tick(h, reads)[1]
    assert fresh[("GET", "rayclusters")] == 1 and fresh[("GET metadata", "rayclusters")] == 0, fresh


def test_a_record_another_process_writes_is_read_on_the_next_tick(controller, bucket, reads):
    h = controller
    run = launch(h, bucket, "elsewhere", ROOMY)
    running(h, [run])
    # Another instance (a launch handler, an operator's CLI) asks for the cancel: its own store, its own memory.
    other = RunStore(Bucket(bucket))
    other.update(run.run_id, lambda r: r.model_copy(update={"cancel_requested": True}))
    noted = dict(h.ctx.store.blobs.listing(f"{ACTIVE}{run.run_id}")[0].metadata)
    assert noted[RECORD_GENERATION] == str(other.get(run.run_id).generation)
    tick(h)
    assert h.kube.get("rayjobs", run.run_id) is None, "the cancel was acted on: the job is stopped"


def test_a_cold_tick_reads_no_record_of_a_quiet_run(controller, bucket, reads):
    """A fresh instance (no memory) passes quiet runs by on their markers' notes; a run whose job changed is read."""
    h = controller
    runs = [launch(h, bucket, f"cold-{i}", ROOMY) for i in range(4)]
    running(h, runs)
    h.ctx.store = RunStore(Bucket(bucket))  # a fresh function instance
    assert quiet_tick(h, reads)[0] == 0, "no record read"
    h.kube.set_status("rayjobs", runs[0].run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    h.ctx.store = RunStore(Bucket(bucket))
    reads.paths.clear()
    tick(h)
    records_read = {path for path in reads.paths if path.startswith("runs/")}
    assert records_read == {f"runs/{runs[0].run_id}.json"}, (reads.paths, [r.run_id for r in runs])
    assert h.ctx.store.get(runs[0].run_id).state == State.SUCCEEDED
    assert all(h.ctx.store.get(r.run_id).state == State.RUNNING for r in runs[1:])


def test_a_writer_that_dies_after_its_record_write_leaves_no_note_behind(controller, bucket):
    h = controller
    run = launch(h, bucket, "unnoted", ROOMY)
    running(h, [run])
    assert quiet.NOTE in marker_of(bucket, run.run_id).metadata
    # Another instance asks for the cancel and dies between writing the record and noting it on the marker.
    other = RunStore(Bucket(bucket))
    other._written = lambda run_id, record: None
    other.update(run.run_id, lambda r: r.model_copy(update={"cancel_requested": True}))
    assert quiet.NOTE not in marker_of(bucket, run.run_id).metadata, "taken off before the record was replaced"
    h.ctx.store = RunStore(Bucket(bucket))  # even a fresh instance, which remembers nothing
    tick(h)
    assert h.kube.get("rayjobs", run.run_id) is None, "the cancel was acted on: the job is stopped"


def test_a_note_that_lands_after_another_writer_took_it_off_is_refused(controller, bucket):
    """Two writers race: the tick notes the RUNNING record late, after another instance took the note off for its
    cancel and died. The late note is on a marker generation that is gone: refused, the cancel is seen."""
    h = controller
    run = launch(h, bucket, "late", ROOMY)
    h.kube.set_status("rayjobs", run.run_id, RUNNING)
    node = f"node-{run.run_id}"
    h.kube.put("nodes", {"metadata": {"name": node, "labels": {"cloud.google.com/gke-spot": "true"}}}, "")
    pod = {"metadata": {"name": f"{run.run_id}-w", "labels": {"raytune.dev/run-id": run.run_id}}}
    h.kube.put("pods", {**pod, "spec": {"nodeName": node}, "status": {"phase": "Running"}})
    late = []
    store = h.ctx.store
    store._note, note = (lambda run_id, record: late.append((run_id, record))), store._note
    tick(h)  # moves the run to RUNNING with its node; its note is held back
    [(run_id, record)] = [(i, r) for i, r in late if r.state == State.RUNNING and r.nodes]
    other = RunStore(Bucket(bucket))
    other._written = lambda run_id, record: None
    other.update(run_id, lambda r: r.model_copy(update={"cancel_requested": True}))
    note(run_id, record)  # the late note: refused
    assert quiet.NOTE not in marker_of(bucket, run_id).metadata
    store._note = note
    tick(h)
    assert h.kube.get("rayjobs", run.run_id) is None, "the cancel was acted on"


def test_a_note_an_older_release_left_behind_is_not_trusted(controller, bucket):
    """An older release writes the record and notes only its generation: the note of the record before no longer
    matches the marker's generation, so the record is read."""
    h = controller
    run, generation = cancelled_behind_the_stores_back(h, bucket, "older")
    patch_metadata(bucket, f"{ACTIVE}{run.run_id}", {RECORD_GENERATION: str(generation)})
    assert quiet.NOTE in marker_of(bucket, run.run_id).metadata, "the older release leaves the note of before"
    h.ctx.store = RunStore(Bucket(bucket))
    tick(h)
    assert h.kube.get("rayjobs", run.run_id) is None


def test_a_record_changed_behind_the_stores_back_is_seen_once_its_note_is_old(controller, bucket, monkeypatch):
    """A record edited by hand (its marker untouched) is read once its note is older than quiet.TRUSTED_S."""
    h = controller
    run, _ = cancelled_behind_the_stores_back(h, bucket, "by-hand")
    tick(h)
    assert h.kube.get("rayjobs", run.run_id) is not None, "within the hour the note stands"
    monkeypatch.setattr(quiet, "TRUSTED_S", 0)
    h.ctx.store = RunStore(Bucket(bucket))  # (an instance that read the record before also waits out RECHECK_S)
    tick(h)
    assert h.kube.get("rayjobs", run.run_id) is None, "then the record is read and the cancel acted on"


def cancelled_behind_the_stores_back(h, bucket, name):
    """A RUNNING run whose record gets a cancel written straight to the bucket (its marker untouched); the run and
    the record's new generation."""
    run = launch(h, bucket, name, ROOMY)
    running(h, [run])
    record = h.ctx.store.get(run.run_id)
    changed = record.model_copy(update={"cancel_requested": True}).model_dump_json().encode()
    return run, Bucket(bucket).write(f"runs/{run.run_id}.json", changed, if_generation_match=record.generation)


def marker_of(bucket, run_id):
    [marker] = [m for m in Bucket(bucket).listing(f"{ACTIVE}{run_id}") if m.name == f"{ACTIVE}{run_id}"]
    return marker


def test_a_launch_that_fits_reads_no_other_runs_record(controller, bucket, reads):
    h = controller
    launch(h, bucket, "first", ROOMY)
    reads.clear()
    launch(h, bucket, "second", ROOMY)
    second = reads["runs"]
    for i in range(6):
        launch(h, bucket, f"more-{i}", ROOMY)
    reads.clear()
    launch(h, bucket, "last", ROOMY)
    assert reads["runs"] == second, "the reads of a launch grew with the runs holding the RayCluster"


def test_a_launch_notes_the_new_record_only_on_a_marker_it_did_not_make(controller, bucket, monkeypatch):
    """The marker a launch makes notes nothing, so every watcher reads the new record: noting the RECEIVED record
    on it is skipped (the record's next write notes it). A marker that was there already may note an older
    record of the run: the new one is noted on it at once, even when the launch dies right after."""
    from functions.core import events
    from functions.handlers import launch as launch_module

    h = controller
    notes: list[str] = []
    original = Bucket.write

    def write(self, path, data, if_generation_match, metadata=None):
        if path.startswith(ACTIVE) and (metadata or {}).get(RECORD_GENERATION):
            notes.append(path)  # a note: the marker written again with a record's generation
        return original(self, path, data, if_generation_match, metadata)

    monkeypatch.setattr(Bucket, "write", write)
    run = launch(h, bucket, "fresh", ROOMY)
    assert run.state == State.SUBMITTED
    assert notes == [f"{ACTIVE}{run.run_id}"], "one note: the SUBMITTED record's"

    def dies_after_the_record(*args, **kwargs):
        raise RuntimeError("the handler died here")

    monkeypatch.setattr(launch_module.steps, "run", dies_after_the_record)
    monkeypatch.setattr(launch_module, "give_claim_back", lambda ctx, run_id: None)  # a dead handler does nothing more
    blobs = Bucket(bucket)
    ids = [run.run_id]
    for name, earlier in (("unmarked", None), ("marked", "1")):
        generation = upload(bucket, f"configs/{name}.json", ROOMY)
        event = object_finalized(bucket, f"configs/{name}.json", generation)
        run_id = events.launch_request(event).run_id
        ids.append(run_id)
        if earlier:  # as an earlier record of the run left it
            blobs.write(f"{ACTIVE}{run_id}", b"", if_generation_match=0, metadata={RECORD_GENERATION: earlier})
        with pytest.raises(RuntimeError):
            launch_module.handle(event, h.ctx)
        [marker] = blobs.listing(f"{ACTIVE}{run_id}")
        record = h.ctx.store.get(run_id)
        assert record.state == State.RECEIVED
        expected = str(record.generation) if earlier else None
        assert marker.metadata.get(RECORD_GENERATION) == expected, (name, marker.metadata)
    assert {r.run_id for r in h.ctx.store.active()} == set(ids), "the watcher reads every marked run's record"


def test_a_launch_sends_its_own_group_alone_unless_the_head_it_would_apply_changed(controller, bucket):
    """A launch onto a RayCluster applied as this launch would apply it patches its group in; one whose config
    changes the head (or the trainer code, the labels) applies the whole RayCluster, head and groups."""
    h = controller

    def launched_with_its_raycluster_writes(name, config):
        before = len(h.kube.requests)
        run = launch(h, bucket, name, config)
        writes = [
            (m, t) for m, p, t in h.kube.requests[before:] if p.endswith("/rayclusters/gemma3-tuning") and m != "GET"
        ]
        return run, writes

    first = launch(h, bucket, "first", ROOMY)
    second, writes = launched_with_its_raycluster_writes("second", ROOMY)
    assert writes == [("PATCH", "application/json-patch+json")]
    bigger = {
        **ROOMY,
        "cluster": {**ROOMY["cluster"], "head": {"cpu": "32", "memory": "64Gi", "ephemeral_storage": "9Gi"}},
    }
    third, writes = launched_with_its_raycluster_writes("third", bigger)
    assert writes == [("PATCH", "application/apply-patch+yaml")]
    cluster = h.kube.get("rayclusters", "gemma3-tuning")
    [head] = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert head["resources"]["requests"]["cpu"] == "32"
    assert [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]] == [
        group_name(r.run_id) for r in (first, second, third)
    ]
    assert all(r.state == State.SUBMITTED for r in (first, second, third))
