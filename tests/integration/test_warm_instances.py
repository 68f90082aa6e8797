"""Warm function instances that remember state between requests (records by their markers' generations, markers,
RayCluster specs), on fake-gcs-server and the Kubernetes API fake: no copy one of them remembers ever delays a run
whose job has ended (issue 51). Two instances share the bucket and the API server, each with its own memory, as two
warm watchers (or a launch and a watcher) do."""

from __future__ import annotations

import dataclasses
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.adapters.gcs import Bucket
from functions.adapters.gke import GkePlatform
from functions.adapters.gke_clusters import GkeClusters
from functions.adapters.kube import Kube, api_client
from functions.adapters.store import ACTIVE, RECORD_GENERATION, RunStore
from functions.core.manifests import owner_id
from functions.core.runs import State
from functions.handlers.launch import handle as launch_handle
from functions.local.cloudevents import object_finalized
from tests.harness import HF_TOKEN
from tests.integration.test_functions import QUICK, upload
from tests.integration.test_invariants import DONE, RUNNING

ROOMY = {**QUICK, "scaling": {"nodes": 1}, "cluster": {"max_worker_nodes": 64}}


class Held:
    """An instance's notes on markers, held back and let through later (a slow request, a late retry)."""

    def __init__(self, store: RunStore):
        self.store, self.pending, self.holding = store, [], False
        self.original = store._note

        def note(run_id, record):
            if self.holding:
                self.pending.append((run_id, record.model_copy()))
            else:
                self.original(run_id, record)

        store._note = note

    def release(self, index: int = 0) -> None:
        if self.pending:
            run_id, record = self.pending.pop(index % len(self.pending))
            self.original(run_id, record)


def second_instance(h, bucket):
    """Another warm instance of the functions: its own store and platform memory, the same bucket, API server,
    clock and settings."""
    manager = h.gke
    platform = GkePlatform(
        h.ctx.settings.project,
        HF_TOKEN,
        clusters=GkeClusters(h.ctx.settings.project, client=manager, create=True),
        kube_factory=lambda cluster: Kube(api_client(h.kube.url)),
        owner=owner_id(bucket),
    )
    return dataclasses.replace(h.ctx, store=RunStore(Bucket(bucket)), platform=platform)


def launched(ctx, bucket, name: str) -> str:
    generation = upload(bucket, f"configs/{name}.json", ROOMY)
    return launch_handle(object_finalized(bucket, f"configs/{name}.json", generation), ctx).run_id


def marker_generation(bucket, run_id) -> str | None:
    found = [m for m in Bucket(bucket).listing(f"{ACTIVE}{run_id}") if m.name == f"{ACTIVE}{run_id}"]
    return found[0].metadata.get(RECORD_GENERATION) if found else None


def test_a_watchers_late_note_never_hides_the_launchs_record(controller, bucket):
    """The race of issue 51: a warm watcher reads a new run's RECEIVED record while its launch goes on, and notes
    that generation on the marker after the launch noted its SUBMITTED one. Before, the watcher's note (written
    without a precondition) put the older generation back: the watcher served its RECEIVED copy from memory (the
    launch's to act on) and left the run SUBMITTED with its job SUCCEEDED, while a fresh instance ended it at once."""
    from functions.core import events
    from functions.handlers import launch as launch_module

    h = controller
    watcher = dataclasses.replace(h.ctx, store=RunStore(Bucket(bucket)))
    held = Held(watcher.store)
    generation = upload(bucket, "configs/raced.json", ROOMY)
    event = object_finalized(bucket, "configs/raced.json", generation)
    run_id = events.launch_request(event).run_id
    steps_run = launch_module.steps.run

    def watcher_ticks_first(ctx, record, facts, *args, **kwargs):
        # between the launch's RECEIVED record and its submission, the watcher ticks: it reads and remembers the
        # RECEIVED record, and its note of it is slow
        if ctx is h.ctx and not held.pending:
            held.holding = True
            watch_tick(watcher)
            held.holding = False
        return steps_run(ctx, record, facts, *args, **kwargs)

    launch_module.steps.run = watcher_ticks_first
    try:
        launch_handle(event, h.ctx)
    finally:
        launch_module.steps.run = steps_run
    submitted = h.ctx.store.get(run_id)
    assert submitted.state == State.SUBMITTED and marker_generation(bucket, run_id) == str(submitted.generation)
    assert [r.state for _, r in held.pending] == [State.RECEIVED]
    held.release()  # the watcher's late note of the RECEIVED generation
    assert marker_generation(bucket, run_id) == str(submitted.generation), "the later note stands"
    h.kube.set_status("rayjobs", run_id, DONE)
    watch_tick(watcher)
    ended = h.ctx.store.get(run_id)
    assert ended.state == State.SUCCEEDED and ended.settled, (ended.state, ended.reason)


def test_a_copy_the_listing_contradicts_is_read_again_before_anything_is_decided(controller, bucket):
    """A launch that dies between writing its SUBMITTED record and noting it leaves the marker naming the RECEIVED
    generation a warm watcher remembers. The listing shows the run's job ended, which no RECEIVED run has: the
    watcher reads the record again rather than wait out RECHECK_S on its copy, and ends the run."""
    from functions.handlers import launch as launch_module

    h = controller
    watcher = dataclasses.replace(h.ctx, store=RunStore(Bucket(bucket)))
    steps_run = launch_module.steps.run
    launch_store_note = h.ctx.store._note

    def watcher_ticks_first(ctx, record, facts, *args, **kwargs):
        if ctx is h.ctx:
            watch_tick(watcher)  # reads and remembers the RECEIVED record, and notes it
            h.ctx.store._note = lambda run_id, record: None  # the launch dies before noting what it writes next
        return steps_run(ctx, record, facts, *args, **kwargs)

    launch_module.steps.run = watcher_ticks_first
    try:
        run_id = launched(h.ctx, bucket, "died-before-its-note")
    finally:
        launch_module.steps.run = steps_run
        h.ctx.store._note = launch_store_note
    assert h.ctx.store.get(run_id).state == State.SUBMITTED
    assert watcher.store.remembered[run_id].record.state == State.RECEIVED
    assert marker_generation(bucket, run_id) == str(watcher.store.remembered[run_id].record.generation)
    h.kube.set_status("rayjobs", run_id, DONE)
    watch_tick(watcher)
    ended = h.ctx.store.get(run_id)
    assert ended.state == State.SUCCEEDED and ended.settled, (ended.state, ended.reason)


def watch_tick(ctx):
    from functions.handlers import watch
    from functions.local.cloudevents import message_published

    return watch.handle(message_published({"kind": "tick"}, str(time.time_ns())), ctx)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["launch", "receive", "redeliver", "tick", "hold", "release", "run", "end"]),
        st.integers(min_value=0, max_value=1),  # which instance
        st.integers(min_value=0, max_value=7),  # which run, or which held note
    ),
    min_size=4,
    max_size=18,
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_every_run_whose_job_ended_is_settled_by_the_next_tick_of_any_instance(controller, bucket, ops):
    """Interleavings of launches (whole, or a first delivery that dies after recording the run and its redelivery),
    ticks and notes (held back, let through later in any order) on two instances with remembered state: whichever
    instance ticks next after a run's job ended, the run is settled by that tick."""
    from functions.core import events
    from functions.handlers import launch as launch_module

    h = controller
    instances = [dataclasses.replace(h.ctx, store=RunStore(Bucket(bucket))), second_instance(h, bucket)]
    held = [Held(i.store) for i in instances]
    runs: list[str] = []
    deliveries: list = []  # launch events whose first delivery died after recording the run
    ended: set[str] = set()
    steps_run = launch_module.steps.run

    def dies(ctx, record, facts, *args, **kwargs):
        if facts.handler == "launch":
            raise ConnectionError("the delivery died after recording the run")
        return steps_run(ctx, record, facts, *args, **kwargs)

    for op, which, index in ops:
        ctx = instances[which]
        if op == "launch" and len(runs) < 4:

            def other_ticks_first(
                ctx, record, facts, *args, other=instances[1 - which], tick_first=index % 2, **kwargs
            ):
                # the other instance ticks while this launch holds the RECEIVED run (an odd `index` says so)
                if facts.handler == "launch" and tick_first:
                    watch_tick(other)
                return steps_run(ctx, record, facts, *args, **kwargs)

            launch_module.steps.run = other_ticks_first
            try:
                runs.append(launched(ctx, bucket, f"warm-{time.time_ns()}"))
            finally:
                launch_module.steps.run = steps_run
        elif op == "receive" and len(runs) < 4:
            name = f"warm-{time.time_ns()}"
            event = object_finalized(bucket, f"configs/{name}.json", upload(bucket, f"configs/{name}.json", ROOMY))
            launch_module.steps.run = dies
            try:
                launch_handle(event, ctx)
            except ConnectionError:
                deliveries.append(event)
                runs.append(events.launch_request(event).run_id)
            finally:
                launch_module.steps.run = steps_run
        elif op == "redeliver" and deliveries:
            launch_handle(deliveries[index % len(deliveries)], ctx)
        elif op == "tick":
            watch_tick(ctx)
            for run_id in ended:
                record = ctx.store.get(run_id)
                assert record.state.terminal and record.settled, (run_id, record.state, record.reason, ops)
            ended.clear()
        elif op == "hold":
            held[which].holding = not held[which].holding
        elif op == "release":
            held[which].release(index)
        elif op in ("run", "end") and runs:
            record = h.ctx.store.get(run_id := runs[index % len(runs)])
            job = h.kube.get("rayjobs", record.job_name) if record.state in (State.SUBMITTED, State.RUNNING) else None
            if job is None or (job.get("status") or {}).get("jobStatus") == "SUCCEEDED":
                continue
            h.kube.set_status("rayjobs", job["metadata"]["name"], RUNNING if op == "run" else DONE)
            if op == "end":
                ended.add(run_id)
    # Whatever was held is let through, and every job ends: the next tick, of either instance, settles them all.
    for notes in held:
        notes.holding = False
        while notes.pending:
            notes.release()
    for run_id in runs:
        record = h.ctx.store.get(run_id)
        if record.state in (State.SUBMITTED, State.RUNNING) and h.kube.get("rayjobs", record.job_name) is not None:
            h.kube.set_status("rayjobs", record.job_name, DONE)
            ended.add(run_id)
    watch_tick(instances[len(ops) % 2])
    for run_id in ended:
        record = h.ctx.store.get(run_id)
        assert record.state.terminal and record.settled, (run_id, record.state, record.reason, ops)
