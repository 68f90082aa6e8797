"""A run moves to where the GPUs are (issue 55), on the local default: `examples/two-regions.yaml` with its first
region told to have no capacity waits there its deadlines.region_seconds (shortened here), moves to the second as
the same attempt, and succeeds there; its record, its console and `raytune status` say where it waited, for how
long and why it moved."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from functions.local.platform import NO_CAPACITY_ENV
from tests.e2e.test_local import RAYTUNE, ROOT, finish, marked_processes, processes_text, reaped, start

pytestmark = pytest.mark.slow
__all__ = ["reaped"]  # its clean-up applies here too
WAIT_S = 6


def test_a_run_without_capacity_in_its_first_region_moves_to_the_second_and_succeeds(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    workdir = tmp_path / "w"
    monkeypatch.setenv(NO_CAPACITY_ENV, "us-central1")
    proc, mark = start(
        workdir,
        str(ROOT / "examples" / "two-regions.yaml"),
        "--set",
        f"deadlines.region_seconds={WAIT_S}",
        "--json",
        home=home,
    )
    out, err = finish(proc)
    assert proc.returncode == 0, err[-4000:]
    record = json.loads(out)
    assert record["state"] == "SUCCEEDED" and record["settled"], err[-4000:]
    states = [h["state"] for h in record["history"]]
    assert states == ["RECEIVED", "SUBMITTED", "QUEUED", "SUBMITTED", "RUNNING", "SUCCEEDED"], states
    left, now = record["placements"]
    assert (left["region"], now["region"], now["until"]) == ("us-central1", "europe-west4", None)
    waited = (dt.datetime.fromisoformat(left["until"]) - dt.datetime.fromisoformat(left["since"])).total_seconds()
    assert WAIT_S < waited < WAIT_S + 30, waited
    assert left["why"].startswith(f"waited {int(waited)}s for capacity in us-central1 (at most {WAIT_S}s")
    assert "no capacity in us-central1" in left["why"]
    assert record["attempts"] == [], "the same attempt: a move is not a lost attempt"
    # Written so every release reads it (release.py): the run as placed where it ran, its regions beside it.
    assert record["format"] == 2 and record["config"]["cluster"]["region"] == "europe-west4"
    assert record["accepted_config"]["cluster"]["fallback_regions"] == ["europe-west4"]
    # Its group was sized in us-central1 (its pods would stay Pending there), released when it moved, and made again
    # in europe-west4; one local worker node was ever started for it, there.
    controller = (workdir / "logs" / "controller.log").read_text()
    for sized in ("in us-central1: worker nodes none -> 2", "in us-central1: worker nodes 2 -> 0"):
        assert sized in controller, controller
    assert "in europe-west4: worker nodes none -> 2" in controller, controller
    assert len(list((workdir / "logs").glob("ray-worker-*.log"))) == 1
    assert "moved from us-central1 to europe-west4 (waited" in err
    assert "regions          us-central1 (waited" in err and "-> europe-west4" in err
    shown = subprocess.run(
        [RAYTUNE, "status", record["run_id"], "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert shown.returncode == 0, shown.stderr
    assert "region     europe-west4 (via us-central1 (waited" in shown.stdout, shown.stdout
    assert "moved      from us-central1 at " in shown.stdout and "no capacity in us-central1" in shown.stdout
    assert not (left_behind := marked_processes(mark)), "a process outlived the run:\n" + processes_text(left_behind)


def test_the_example_validates():
    done = subprocess.run(
        [RAYTUNE, "validate", str(Path(ROOT, "examples", "two-regions.yaml"))], capture_output=True, text=True
    )
    assert done.returncode == 0 and "ok:" in done.stdout, done.stdout + done.stderr
