"""Run ids: deterministic, DNS labels short enough for a RayJob name, different for different events."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from functions.core import runids


@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=60), st.integers(1, 2**63))
def test_object_ids_are_valid_labels(bucket, name, generation):
    run_id = runids.for_object(bucket, f"configs/{name}.json", generation)
    assert runids.is_valid_id(run_id) and len(run_id) <= runids.MAX_LEN
    assert run_id == runids.for_object(bucket, f"configs/{name}.json", generation)


def test_a_reupload_is_a_new_run():
    assert runids.for_object("b", "configs/a.json", 1) != runids.for_object("b", "configs/a.json", 2)


@given(st.text(max_size=100), st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9-]{0,23}[a-z0-9]", fullmatch=True)))
def test_message_ids_are_valid_labels(message_id, run_name):
    assert runids.is_valid_id(runids.for_message(message_id, run_name))


def test_nightly_is_one_a_day():
    assert runids.for_nightly(dt.date(2026, 12, 2)) == "nightly-20261202"
    assert runids.for_nightly(dt.date(2026, 12, 2), "Team Vision!") == "team-vision-20261202"


def test_names_starting_with_a_digit_get_a_letter():
    assert runids.for_object("b", "configs/2026-run.json", 1).startswith("r-2026-run-")
