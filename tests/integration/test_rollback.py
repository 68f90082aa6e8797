"""A rollback (issues 39, 53, 55), both ways. The previous release (functions/ at PREVIOUS, the release landed before
this one, taken from this clone's history with `git archive`) reads every record and allocation object that this
release's handlers wrote through functions-framework on the emulators: each parses, each accepted config validates
by that release's rules, its decision takes the same first step as this release's, and what it would drop on a
rewrite is only the fields listed in DROPPED_ON_REWRITE, each with why dropping it is safe; a record it cannot act
on (a newer format: a run that may move between regions) it leaves alone, never quarantined while its GPUs run on.
And this release reads what the previous release writes back (its rewrite of each record) and decides the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from functions.core import decide as decision
from functions.core.runs import RunRecord, State
from tests.fakes.http_events import post, storage_event
from tests.integration.test_functions import QUICK, upload, watch, write_result

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "23bbbcf"  # the release landed before this one (stop 58): format 3, sweeps, no regions

# Fields this release writes that the previous one does not know: it reads records without them and, when it
# rewrites one, leaves them out. What is new for regions (a config's regions and waits, the record's placements) is
# only in records of format 4, which that release leaves alone, and is left out of every other record.
DROPPED_ON_REWRITE: set[str] = set()

# Runs in the previous release's own process (its API: Step.move): it prints one JSON line per stored object read.
READER = """
import dataclasses, datetime as dt, json, sys
from functions.core.allocation import Allocation
from functions.core.decide import Facts, decide
from functions.core.runs import RunRecord
now = dt.datetime.fromisoformat(sys.argv[2])
for path, text in json.load(open(sys.argv[1])).items():
    if path.startswith("clusters/"):
        alloc = Allocation.model_validate_json(text)
        print(json.dumps({"path": path, "holders": alloc.holders, "queue": [w.run_id for w in alloc.queue]}))
        continue
    record = RunRecord.model_validate_json(text)
    if record.from_newer_release:  # as its handlers and store do: read, never acted on or rewritten
        print(json.dumps({"path": path, "state": record.state.value, "newer": True}))
        continue
    if record.config is not None:
        record.run_config()
    step = decide(record, Facts(now=now, handler="watch"))
    kept = json.loads(record.model_dump_json())
    print(json.dumps({
        "path": path, "state": record.state.value, "step": [step.action.value, step.move and step.move.state.value],
        "dropped": sorted(set(json.loads(text)) - set(kept)), "rewritten": record.model_dump_json(),
    }))
"""


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> Path:
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], check=False)
    if found.returncode != 0:
        pytest.skip(f"the previous release {PREVIOUS} is not in this clone's history (a shallow clone?)")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS, "functions"], check=True, capture_output=True
    )
    tree = tmp_path_factory.mktemp("previous-release")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def read_by(tree: Path, stored: dict[str, str], now: str, tmp_path: Path) -> dict[str, dict]:
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    out = subprocess.run(
        [sys.executable, "-c", READER, str(tmp_path / "stored.json"), now],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return {line["path"]: line for line in map(json.loads, out.stdout.splitlines())}


def launch(server, bucket, name, config):
    post(
        server["launch"], storage_event(bucket, f"configs/{name}.json", upload(bucket, f"configs/{name}.json", config))
    )


def test_the_previous_release_reads_what_this_release_stored(
    controller, functions_server, bucket, previous_release, tmp_path
):
    h = controller
    launch(functions_server, bucket, "done", QUICK)
    launch(functions_server, bucket, "running", {**QUICK, "name": "running", "scaling": {"nodes": 1}})
    launch(functions_server, bucket, "queued", {**QUICK, "name": "queued", "scaling": {"nodes": 5}})
    launch(functions_server, bucket, "cancelled", {**QUICK, "name": "cancelled", "scaling": {"nodes": 3}})
    launch(functions_server, bucket, "bad", {**QUICK, "training": {"epochs": -1}})
    sweep = {"space": {"lora.r": {"kind": "choice", "values": [8, 16]}}, "trials": 2, "concurrent": 1}
    swept = {**QUICK, "name": "swept", "scaling": {"nodes": 1}, "dataset": {"eval_fraction": 0.1}, "sweep": sweep}
    launch(functions_server, bucket, "swept", swept)
    moving = {"region": "us-central1", "fallback_regions": ["europe-west4"]}
    launch(functions_server, bucket, "moving", {**QUICK, "name": "moving", "scaling": {"nodes": 1}, "cluster": moving})
    by_name = {r.config["name"] if r.config else "bad": r for r in h.ctx.store.active()}
    by_name |= {"bad": next(h.ctx.store.get(n[5:-5]) for n in h.ctx.store.blobs.list("runs/") if "/bad-" in n)}
    write_result(h, by_name["shop-descriptions"].run_id)
    h.kube.set_status("rayjobs", by_name["shop-descriptions"].run_id, {"jobStatus": "SUCCEEDED"})
    h.kube.set_status("rayjobs", by_name["running"].run_id, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    watch(functions_server, {"kind": "cancel", "run_id": by_name["cancelled"].run_id})
    watch(functions_server)
    # A launch that failed gave its claim back (a field the previous release knows too).
    claimed = by_name["queued"].run_id
    h.ctx.store.update(claimed, lambda r: r.model_copy(update={"claim_released": True}))

    stored = {
        name: h.ctx.store.blobs.read(name)[0].decode()
        for name in h.ctx.store.blobs.list("runs/") + h.ctx.store.blobs.list("clusters/")
        if name.endswith(".json") and not name.startswith("runs/active/")
    }
    now = h.clock()
    read = read_by(previous_release, stored, now.isoformat(), tmp_path)

    assert set(read) == set(stored), "every object parsed by the previous release"
    records = {path: RunRecord.model_validate_json(text) for path, text in stored.items() if path.startswith("runs/")}
    states = {r.state for r in records.values()}
    assert {State.SUCCEEDED, State.RUNNING, State.QUEUED, State.CANCELLED, State.REJECTED} <= states, states
    # A run that may move between regions is format 4: the release before regions (which would follow it in its first
    # region only, and cannot keep its config on a rewrite) reads it as a newer release's and leaves it alone.
    [moving_path] = [path for path, r in records.items() if r.config and r.config["cluster"].get("fallback_regions")]
    assert read[moving_path].get("newer") is True and json.loads(stored[moving_path])["format"] == 4
    [swept_path] = [path for path, r in records.items() if r.config and r.config.get("sweep")]
    assert json.loads(stored[swept_path])["format"] == 3 and not read[swept_path].get("newer")  # it runs sweeps
    assert all(
        json.loads(text)["format"] == 2
        for path, text in stored.items()
        if path.startswith("runs/") and path not in (swept_path, moving_path)
    )
    for path, record in records.items():
        if path == moving_path:
            continue
        old = read[path]
        assert old["state"] == record.state.value
        assert set(old["dropped"]) <= DROPPED_ON_REWRITE, f"{path}: the previous release would drop {old['dropped']}"
        ours = decision.decide(record, decision.Facts(now=now, handler="watch"))
        assert old["step"] == [ours.action.value, ours.move and ours.move.state.value], (path, record.state)
        # The other way: what the previous release writes back is read here as it was, and decided the same.
        back = RunRecord.model_validate_json(old["rewritten"])
        assert back.model_dump(exclude={"generation"}) == record.model_dump(exclude={"generation"}), path
        again = decision.decide(back, decision.Facts(now=now, handler="watch"))
        assert [again.action.value, again.move and again.move.state.value] == old["step"], path
    assert "claim_released" not in read[f"runs/{claimed}.json"]["dropped"]  # a field that release knows
    [alloc] = [v for k, v in read.items() if k.startswith("clusters/")]
    assert alloc["queue"] == [] or alloc["holders"], alloc
