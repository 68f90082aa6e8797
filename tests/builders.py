"""Test data built one thing at a time, in the shape of Kueue's test wrappers
(`pkg/util/testing/v1beta2/wrappers.go`: `MakeWorkload(name, ns).Queue(q).Request(...).Obj()`): a run record
with the defaults a test does not care about, each method setting one thing and returning the builder, `obj()`
the record. One builder for every tier's records (the decision table's, the store's, the story's)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from functions.core.runs import RunRecord, State, Transition

T0 = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


class RunBuilder:
    def __init__(self, run_id: str, state: State, at: dt.datetime) -> None:
        self._fields: dict[str, Any] = {
            "run_id": run_id,
            "state": state,
            "source": {"kind": "upload", "ref": "gs://b/c#1"},
            "created_at": at,
            "updated_at": at,
            "config": {"name": "x"},
        }
        self._history: list[Transition] = [Transition(state=state, at=at)]

    def reason(self, reason: str | None) -> RunBuilder:
        self._fields["reason"] = reason
        return self

    def source(self, kind: str, ref: str = "gs://b/c#1") -> RunBuilder:
        self._fields["source"] = {"kind": kind, "ref": ref}
        return self

    def config(self, config: dict[str, Any]) -> RunBuilder:
        self._fields["config"] = config
        return self

    def updated(self, at: dt.datetime) -> RunBuilder:
        """Last written at `at`."""
        self._fields["updated_at"] = at
        return self

    def history(self, *passed: tuple[State, dt.datetime]) -> RunBuilder:
        """The states it passed through and when, oldest first (by default: its state, since it was created)."""
        self._history = [Transition(state=state, at=at) for state, at in passed]
        return self

    def with_fields(self, **fields: Any) -> RunBuilder:
        """Any other field of the record, as RunRecord names it."""
        self._fields.update(fields)
        return self

    def obj(self) -> RunRecord:
        return RunRecord(**{"history": self._history, **self._fields})


def make_run(run_id: str = "run-1", state: State = State.RECEIVED, at: dt.datetime = T0) -> RunBuilder:
    return RunBuilder(run_id, state, at)
