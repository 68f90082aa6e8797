"""`raytune local`'s follow loop on a busy machine: a tick that meets a transient error (the dashboard or the
bucket slow to answer) is tried again, as Pub/Sub would redeliver; a permanent error, or nothing but
transient ones for STALLED_S, ends it (`raytune local` then cancels the run and prints its record)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest

from functions.core.errors import PermanentError, TransientError
from functions.core.runs import RunRecord, State, Transition
from functions.local import eventing

ROOT = Path(__file__).resolve().parents[2]

NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)


def running_record() -> RunRecord:
    return RunRecord(
        run_id="r-1",
        state=State.RUNNING,
        source={"kind": "upload", "ref": "gs://b/c#1"},
        created_at=NOW,
        updated_at=NOW,
        config={},
        history=[Transition(state=State.RECEIVED, at=NOW), Transition(state=State.RUNNING, at=NOW)],
    )


class Platform:
    def __init__(self) -> None:
        self.node_count = 0

    def job_logs(self, run_id: str) -> str:
        return ""


class Store:
    """The run's record: RUNNING until a tick gets through, which settles it."""

    def __init__(self) -> None:
        self.record = running_record()

    def get(self, run_id: str) -> RunRecord:
        return self.record


def eventing_for(said: list[str]) -> eventing.Eventing:
    ctx = SimpleNamespace(store=Store())
    return eventing.Eventing(ctx, Platform(), None, said.append)  # type: ignore[arg-type]


def ticks(monkeypatch, *outcomes: Exception | None) -> list[int]:
    """watch.handle raises the given errors in turn, then gets through (the run SUCCEEDED and is settled);
    returns the count of ticks."""
    count = [0]

    def handle(event, ctx):
        count[0] += 1
        outcome = outcomes[count[0] - 1] if count[0] <= len(outcomes) else None
        if outcome is not None:
            raise outcome
        ctx.store.record = ctx.store.record.model_copy(update={"state": State.SUCCEEDED, "settled": True})

    monkeypatch.setattr(eventing.watch, "handle", handle)
    monkeypatch.setattr(eventing, "TICK_S", 0.01)
    return count


def test_transient_tick_errors_are_tried_again(monkeypatch, caplog):
    count = ticks(monkeypatch, TransientError("HTTP 503: busy"), ConnectionResetError("reset"), None)
    said: list[str] = []
    record = eventing_for(said).follow(running_record())
    assert record.state == State.SUCCEEDED and count[0] == 3
    assert "tick failed, tried again: HTTP 503: busy" in caplog.text
    assert not any("SUCCEEDED" in s for s in said), "the end is said once, by the summary after the follow"


def test_a_permanent_tick_error_ends_the_follow(monkeypatch):
    ticks(monkeypatch, PermanentError("HTTP 403: forbidden"))
    with pytest.raises(PermanentError):
        eventing_for([]).follow(running_record())


def test_only_transient_errors_for_too_long_end_the_follow(monkeypatch):
    ticks(monkeypatch, *[TransientError("HTTP 503: busy")] * 1000)
    monkeypatch.setattr(eventing, "STALLED_S", 0.05)
    with pytest.raises(TransientError):
        eventing_for([]).follow(running_record())


def test_a_night_run_again_after_it_failed_says_how_to_retry_it(tmp_path):
    failed = running_record().model_copy(
        update={"run_id": "nightly-20261203", "state": State.FAILED, "settled": True, "created_at": NOW}
    )
    later = NOW + dt.timedelta(hours=1)
    hint = eventing.retry_hint(failed, later, tmp_path)
    assert hint == (
        f"nightly-20261203 ran before and is FAILED: `raytune retry nightly-20261203 --workdir {tmp_path}` "
        "starts its next attempt (from its last checkpoint, if it saved one)"
    )
    assert eventing.retry_hint(failed, NOW - dt.timedelta(seconds=1), tmp_path) is None  # created by this launch
    assert eventing.retry_hint(failed.model_copy(update={"state": State.SUCCEEDED}), later, tmp_path) is None


def test_raytune_local_says_what_the_run_will_take_before_it_starts(capsys):
    """The estimate validate computes, printed by raytune local before the run (issue 67): its time on this
    machine, never the cloud's node-hours or money."""
    from functions.cli.local_commands import print_estimate

    print_estimate(None)
    said = capsys.readouterr().out
    assert said.startswith("estimate: 2 x CPU on this machine\n") and "  training  48 samples in" in said, said
    assert "start-up" in said and "cost" not in said and "node-hours" not in said


def test_submit_local_says_the_estimate_before_it_runs(capsys, monkeypatch):
    """`submit --local` is `raytune local` by another name: the same estimate first, then the run (here its
    run is not started: what is tested is what the command says before it)."""
    from functions.cli import main as cli
    from functions.local import command

    ran = []
    monkeypatch.setattr(command, "run", lambda config, workdir: ran.append(config) or 0)
    quickstart = str(ROOT / "examples" / "quickstart.json")
    assert cli(["submit", quickstart, "--local"]) == 0
    said = capsys.readouterr()
    assert ran == [quickstart] and "estimate: 2 x CPU on this machine" in said.out, said
