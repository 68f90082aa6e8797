"""Version skew (issue 63), against the previous releases' own code: each release a deployment may roll back to
(CHANGELOG.md, from release.OLDEST_READER on: tests/releases.py) serves its own handlers from its own tree, by
functions-framework in a process of its own, beside this release's, on the same bucket, Pub/Sub emulator and two
regions' Kubernetes API servers. Both directions, with live runs of every kind each release writes: what one
release wrote, the other follows to the end, and nothing is quarantined, lost, launched twice or left holding
GPUs in any region. An older release that cannot carry out a newer feature follows the run where it is (a run
waiting to move waits in its region; a cached image is pulled)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from functions.core import release
from functions.core.config import RunConfig
from functions.core.runs import RunRecord, State
from tests import releases
from tests.fakes.http_events import post, pubsub_event, storage_event
from tests.fakes.pubsub import PROJECT
from tests.harness import REGIONS, serve_functions
from tests.integration.test_functions import QUICK, upload, watch, write_result

PREVIOUS = releases.previous()
MOVABLE = {
    **QUICK,
    "scaling": {"nodes": 1},
    "cluster": {"region": REGIONS[0], "fallback_regions": [REGIONS[1]]},
    "deadlines": {"pending_seconds": 3600, "region_seconds": 300},
}
CACHED = {
    **QUICK,
    "scaling": {"nodes": 1},
    "cluster": {"image_cache": f"projects/{PROJECT}/global/images/raytune-trainer-0123456789ab"},
}
SWEPT = {
    **QUICK,
    "scaling": {"nodes": 1},
    "dataset": {"eval_fraction": 0.1},
    "sweep": {"space": {"lora.r": {"kind": "choice", "values": [8, 16]}}, "trials": 2, "concurrent": 1},
}
QUEUED = {**QUICK, "scaling": {"nodes": 5}}
TRACKED = {
    **QUICK,
    "scaling": {"nodes": 1},
    "tracking": {"mlflow": {"uri": "https://mlflow.example.com"}, "vertex": {"location": "europe-west4"}},
}
RUNNING = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
SUCCEEDED = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}


def test_the_changelog_names_this_release_and_the_ones_a_deployment_may_roll_back_to():
    found = releases.changelog()
    assert found[0] == (release.VERSION, None), "the newest section is this release (its commit is the one landing it)"
    assert ("0.1.0", "2c03a0d") in found and ("0.2.0", "cbac668") in found and ("0.3.0", "4e02b90") in found
    assert ("0.4.0", "7805250") in found
    assert [v for v, _ in PREVIOUS] == ["0.4.0", "0.3.0", "0.2.0", "0.1.0"]


@pytest.fixture(scope="module", params=[v for v, _ in PREVIOUS])
def previous(request, tmp_path_factory):
    return request.param, releases.extracted(request.param, tmp_path_factory)


@pytest.fixture
def both(regional, previous, bucket, tmp_path):
    """(this release's urls, the previous release served) on the same state."""
    version, tree = previous
    h = regional
    with (
        serve_functions() as ours,
        releases.serve(
            version,
            tree,
            bucket=bucket,
            project=PROJECT,
            kubes={region: {"url": kube.url} for region, kube in h.kubes.items()},
            settings={"events_topic": h.ctx.settings.events_topic},
            now=h.clock(),
            log=tmp_path / f"release-{version}.log",
        ) as theirs,
    ):
        yield ours, theirs


def launch(urls, bucket, name, config):
    post(urls["launch"], storage_event(bucket, f"configs/{name}.json", upload(bucket, f"configs/{name}.json", config)))


def tick(h, urls, served=None):
    if served is not None:
        served.sync(h.clock())
    watch(urls)


def records(h) -> dict[str, RunRecord]:
    """Every run record in the bucket by its config's name (read by this release)."""
    found = {}
    for name in h.ctx.store.blobs.list("runs/"):
        if name.startswith("runs/active/"):
            continue
        record = h.ctx.store.get(name.removeprefix("runs/").removesuffix(".json"))
        found[(record.config or {}).get("name", record.run_id) if not record.nightly else "nightly"] = record
    return found


def assert_nothing_lost(h, expected: set[str]) -> dict[str, RunRecord]:
    assert h.ctx.store.blobs.list("quarantine/") == [], "nothing is quarantined"
    found = records(h)
    assert set(found) == expected
    for name, record in found.items():
        if record.state in (State.SUBMITTED, State.RUNNING):
            kube = h.kubes[record.region]
            assert kube.get("rayjobs", record.job_name) is not None, f"{name}: its RayJob in {record.region} is kept"
            assert all(k.get("rayjobs", record.job_name) is None for r, k in h.kubes.items() if r != record.region)
    return found


def finish(h, urls, served=None, ticks: int = 4) -> dict[str, RunRecord]:
    """Every live run's job succeeds where it runs (jobs start as the nodes others leave come); the serving release
    follows each to its end."""
    for _ in range(ticks):
        for record in records(h).values():
            if record.state in (State.SUBMITTED, State.RUNNING):
                write_result(h, record.run_id)
                h.kubes[record.region].set_status("rayjobs", record.job_name, SUCCEEDED)
        tick(h, urls, served)
    return records(h)


def assert_no_gpus_held(h):
    """No region holds a worker group with nodes or an allocation hold once every run has ended."""
    for region, kube in h.kubes.items():
        cluster = kube.get("rayclusters", "gemma3-tuning")
        groups = (cluster or {}).get("spec", {}).get("workerGroupSpecs") or []
        assert all(g["replicas"] == 0 for g in groups), (region, groups)
    for name in h.ctx.store.blobs.list("clusters/"):
        held = h.ctx.store.blobs.read(name)[0].decode()
        assert '"holders": {}' in held or '"holders":{}' in held, (name, held)


def test_the_previous_release_follows_what_this_release_wrote_to_the_end(regional, both, bucket, previous):
    h, (ours, theirs) = regional, both
    version, _ = previous
    # Every kind this release writes: moved and running, waiting to move, an image cache, a sweep, queued, a nightly,
    # a tracked run.
    launch(ours, bucket, "moved", {**MOVABLE, "name": "moved"})
    h.clock.advance(400)
    tick(h, ours)  # its bound passed while its job waited: stopped in us-central1, submitted in europe-west4
    moved = records(h)["moved"]
    assert (moved.state, moved.region) == (State.SUBMITTED, REGIONS[1])
    h.kubes[REGIONS[1]].set_status("rayjobs", moved.job_name, RUNNING)
    launch(ours, bucket, "waiting", {**MOVABLE, "name": "waiting"})
    launch(ours, bucket, "cached", {**CACHED, "name": "cached"})
    launch(ours, bucket, "swept", {**SWEPT, "name": "swept"})
    launch(ours, bucket, "queued", {**QUEUED, "name": "queued"})
    launch(ours, bucket, "tracked", {**TRACKED, "name": "tracked"})
    upload(bucket, "library/nightly.json", {**QUICK, "name": "nightly", "scaling": {"nodes": 1}})
    post(ours["launch"], pubsub_event({"config_uri": f"gs://{bucket}/library/nightly.json", "nightly": True}))
    tick(h, ours)
    kinds = {"moved", "waiting", "cached", "swept", "queued", "nightly", "tracked"}
    found = assert_nothing_lost(h, kinds)
    assert found["moved"].state == State.RUNNING and found["queued"].state == State.QUEUED
    written = {n: h.ctx.store.blobs.read(f"runs/{r.run_id}.json")[0] for n, r in found.items()}
    assert all(f'"written_by": "{release.VERSION}"'.encode() in text for text in written.values())
    tracked = json.loads(written["tracked"])
    # Neither where 0.1.0 and 0.2.0 look (config) nor where 0.3.0 does (accepted_config): in config_extensions.
    assert "tracking" not in tracked["config"] and "tracking" not in tracked.get("accepted_config", {})
    assert tracked["config_extensions"]["tracking"]["mlflow"]["uri"] == "https://mlflow.example.com"
    # Nor where 0.4.0 does (config_extensions, all of which it merges back): under the release that reads it.
    assert "vertex" not in tracked["config_extensions"]["tracking"]
    assert tracked["config_extensions_by_release"]["0.5.0"]["tracking.vertex"]["location"] == "europe-west4"
    assert found["tracked"].run_config().tracking.vertex is not None, "this release reads it back"

    # The previous release serves alone (a rollback; or its instances finishing while traffic moves): its ticks
    # quarantine nothing and stop no job; the run waiting to move waits in its region past its bound, or, for a
    # release that reads the accepted config (release.ACCEPTED_READER on), moves as this release would.
    for _ in range(2):
        tick(h, theirs.urls, theirs)
    h.clock.advance(400)
    tick(h, theirs.urls, theirs)
    found = assert_nothing_lost(h, kinds)
    moves = release.version_key(version) >= release.version_key(release.ACCEPTED_READER)
    assert found["waiting"].state == State.SUBMITTED and found["waiting"].region == REGIONS[1 if moves else 0]
    assert found["moved"].state == State.RUNNING and found["moved"].region == REGIONS[1]

    # It follows every run to its end where it runs, and releases what each held.
    ended = finish(h, theirs.urls, theirs)
    assert {n: r.state for n, r in ended.items()} == dict.fromkeys(kinds, State.SUCCEEDED)
    assert all(r.settled for r in ended.values())
    assert_no_gpus_held(h)
    # This release reads back everything the previous one wrote.
    tick(h, ours)
    assert_nothing_lost(h, kinds)


def test_this_release_follows_what_the_previous_release_wrote_and_hands_back(regional, both, bucket, previous):
    h, (ours, theirs) = regional, both
    version, _ = previous
    kinds = {"plain", "swept", "queued", "nightly"}
    theirs.sync(h.clock())
    launch(theirs.urls, bucket, "plain", {**QUICK, "name": "plain", "scaling": {"nodes": 1}})
    launch(theirs.urls, bucket, "swept", {**SWEPT, "name": "swept"})
    if version != "0.1.0":  # the release before regions rejects such a config
        kinds.add("moving")
        launch(theirs.urls, bucket, "moving", {**MOVABLE, "name": "moving"})
    launch(theirs.urls, bucket, "queued", {**QUEUED, "name": "queued"})
    upload(bucket, "library/nightly.json", {**QUICK, "name": "nightly", "scaling": {"nodes": 1}})
    post(theirs.urls["launch"], pubsub_event({"config_uri": f"gs://{bucket}/library/nightly.json", "nightly": True}))
    plain = records(h)["plain"]
    h.kubes[REGIONS[0]].set_status("rayjobs", plain.job_name, RUNNING)
    tick(h, theirs.urls, theirs)
    found = assert_nothing_lost(h, kinds)
    assert found["plain"].state == State.RUNNING and found["queued"].state == State.QUEUED

    # This release takes over (an upgrade) with the previous one's instances still serving: ticks of both.
    h.clock.advance(400)
    tick(h, ours)
    tick(h, theirs.urls, theirs)
    tick(h, ours)
    found = assert_nothing_lost(h, kinds)
    if "moving" in found:  # this release carries out the move the previous one wrote, and both follow it there
        assert (found["moving"].state, found["moving"].region) == (State.SUBMITTED, REGIONS[1])

    # Each run ends, followed by either release, and nothing holds GPUs anywhere.
    ended = finish(h, ours)
    ended = finish(h, theirs.urls, theirs, ticks=1) | ended
    assert {n: r.state for n, r in records(h).items()} == dict.fromkeys(kinds, State.SUCCEEDED)
    assert all(r.settled for r in records(h).values())
    assert_no_gpus_held(h)


def test_a_record_this_release_rewrites_from_a_format_4_one_is_read_by_every_release():
    """A run that 0.2.0 wrote as format 4 (its regions in `config`) is rewritten here in the form every release reads:
    the placed config in `config`, the accepted one beside it, the format that `config` needs."""
    now = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)
    config = {**MOVABLE, "name": "m", "storage_path": "gs://bucket/runs"}
    accepted = RunConfig.model_validate(config).model_dump(mode="json")
    old = {"format": 4, "run_id": "m-1", "state": "QUEUED", "source": {"kind": "upload", "ref": "gs://bucket/c"}}
    record = RunRecord.model_validate({**old, "created_at": now, "updated_at": now, "config": accepted})
    assert record.format == 4 and not record.from_newer_release
    written = record.model_dump(mode="json")
    assert written["format"] == 2 and written["config"]["cluster"] == {
        k: v for k, v in accepted["cluster"].items() if k != "fallback_regions"
    }
    assert written["accepted_config"] == accepted and written["written_by"] == release.VERSION
    assert RunRecord.model_validate(written).config == accepted


SCHEMA = "import json; from functions.core.config import RunConfig; print(json.dumps(RunConfig.model_json_schema()))"


def field_paths(schema: dict) -> set[str]:
    """Every field of a JSON Schema as a dotted path (a list element's field: `list[].field`)."""
    defs = schema.get("$defs", {})

    def walk(node: dict, prefix: str, seen: tuple[str, ...]) -> set[str]:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return set() if name in seen else walk(defs[name], prefix, (*seen, name))
        found: set[str] = set()
        for variant in node.get("anyOf", []) + node.get("allOf", []):
            found |= walk(variant, prefix, seen)
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            found |= walk(node["items"], f"{prefix}[]", seen)
        for key, child in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            found |= {path} | walk(child, path, seen)
        return found

    return walk(schema, "", ())


@pytest.mark.parametrize("version", [v for v, _ in PREVIOUS])
def test_every_config_field_an_older_release_lacks_is_kept_out_of_what_it_reads(version, tmp_path):
    """Held against each release's own JSON Schema: the fields of today's config that its schema lacks are
    exactly those NEWER_FIELDS names as newer than it (0.4.0 knows `tracking` but not `tracking.vertex`)."""
    tree = releases.tree(dict(PREVIOUS)[version], tmp_path / version)
    if tree is None:
        pytest.skip(f"release {version} is not in this clone's history")
    theirs = subprocess.run(
        [sys.executable, "-c", SCHEMA], cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True, text=True
    )
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    newer = field_paths(RunConfig.model_json_schema()) - field_paths(json.loads(theirs.stdout))
    # A newer section's own fields go with it (leaving out `tracking` leaves out `tracking.mlflow.uri`).
    newer = {path for path in newer if not any(path.startswith(f"{other}.") for other in newer)}
    named = set(release.newer_than(version))
    assert newer == {f for f in named if not any(f.startswith(f"{other}.") for other in named)}
