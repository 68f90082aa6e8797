"""How long a local head stays warm after a clean run (issue 68): an idle head costs about 0.05 CPU-seconds a
second, so it stays long only for a person who is iterating (a run that followed the workdir's last one closely,
or attached to its warm head); after a first run only for an immediate rerun; as given when the command or
RAYTUNE_LOCAL_KEEP_WARM_S says."""

from __future__ import annotations

import time

import pytest

from functions.local import session

pytestmark = pytest.mark.unit


def test_a_first_run_keeps_the_head_only_for_an_immediate_rerun(tmp_path):
    now = time.time()
    assert not session.iterating(tmp_path, reused=False, now=now)
    assert session.keep_warm_for(None, iterated=False) == session.FIRST_KEEP_WARM_S < 60


def test_a_run_soon_after_the_last_one_or_on_its_warm_head_is_iterating(tmp_path):
    session.run_ended(tmp_path)
    ended = (tmp_path / "logs" / session.ENDED_FILE).stat().st_mtime
    assert session.iterating(tmp_path, reused=False, now=ended + session.ITERATING_S - 1)
    assert not session.iterating(tmp_path, reused=False, now=ended + session.ITERATING_S + 1), "after a pause"
    assert session.iterating(tmp_path, reused=True, now=ended + 10 * session.ITERATING_S)
    assert session.keep_warm_for(None, iterated=True) == session.KEEP_WARM_S


def test_a_given_time_wins_over_the_rule(monkeypatch):
    assert session.keep_warm_for(0, iterated=True) == 0
    assert session.keep_warm_for(120, iterated=False) == 120
    monkeypatch.setenv(session.KEEP_WARM_ENV, "45")
    assert session.keep_warm_default() == 45
    monkeypatch.delenv(session.KEEP_WARM_ENV)
    assert session.keep_warm_default() is None  # the rule
    monkeypatch.setenv(session.KEEP_WARM_ENV, "soon")
    assert session.keep_warm_default() is None
