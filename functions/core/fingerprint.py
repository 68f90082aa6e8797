"""What a nightly run would train on, as one fingerprint: the validated config, the trainer code and the
dataset's object versions (GCS generations, the Hub revision, local file stamps). A nightly whose
fingerprint equals the last successful nightly's of the same config name has nothing new to learn: it
ends SKIPPED without touching a cluster."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from functions.core.release import Stamped

NIGHTLY_PREFIX = "nightly/"  # nightly/<config name>.json: the last successful nightly's inputs


class Inputs(BaseModel):
    fingerprint: str | None  # None: the dataset could not be versioned, so the run always trains
    config_sha256: str
    code_sha256: str
    dataset_sha256: str | None
    dataset_objects: int  # data files (shards) the dataset had when looked at
    unversioned: str | None = None  # why the dataset has no version the controller can see
    unchanged_since: str | None = None  # the last successful nightly with this fingerprint, or a live one
    in_flight: bool = False  # unchanged_since is still training these inputs


class LastTrained(Stamped, BaseModel):
    """The pointer a successful nightly leaves for the next one."""

    name: str
    run_id: str
    fingerprint: str
    created_at: dt.datetime  # the run's arrival: an older run finishing late never moves the pointer back
    generation: int = Field(0, exclude=True)


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def inputs(
    config: dict[str, Any],
    code_sha256: str,
    dataset: list[tuple[str, str]] | None,
    unversioned: str | None = None,
    last: LastTrained | None = None,
    live: Sequence[tuple[str, str | None]] = (),
) -> Inputs:
    """The run's inputs; `dataset` is (object, version) pairs, None when they cannot be listed. `live` are
    the (run id, fingerprint) of this config name's nightlies still under way: one of them training the
    same inputs makes this one unchanged too (two nights of one slow run must not train it twice)."""
    config_sha = _sha256(config)
    dataset_sha = None if dataset is None else _sha256(sorted(dataset))
    fingerprint = None if dataset_sha is None else _sha256([config_sha, code_sha256, dataset_sha])
    unchanged = (
        last.run_id if last is not None and fingerprint is not None and last.fingerprint == fingerprint else None
    )
    training = next((run_id for run_id, other in live if fingerprint is not None and other == fingerprint), None)
    return Inputs(
        fingerprint=fingerprint,
        config_sha256=config_sha,
        code_sha256=code_sha256,
        dataset_sha256=dataset_sha,
        dataset_objects=len(dataset or []),
        unversioned=unversioned if dataset is None else None,
        unchanged_since=unchanged or training,
        in_flight=unchanged is None and training is not None,
    )


def pointer_path(name: str) -> str:
    return f"{NIGHTLY_PREFIX}{name}.json"
