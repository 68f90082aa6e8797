"""The launch's acceptance as a table (functions/core/acceptance.py judge): a request, the document the handler
read (or None: refused before reading), the deployment's rules, the clock; the verdict. No store, no bucket."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from functions.core.acceptance import Document, before_reading, judge
from functions.core.events import LaunchRequest
from functions.core.policy import Policy
from functions.handlers.settings import Settings

pytestmark = pytest.mark.unit
NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
RULES = Settings(
    project="p",
    bucket="runs-bucket",
    watch_topic=None,
    events_topic=None,
    max_event_age_s=3600,
    hf_token=None,
    policy=Policy(nightly_key="k3y", tracking_destinations=("mlflow",)),
)
GOOD = json.dumps({"name": "quick", "model": {"id": "tiny://gemma3"}, "scaling": {"gpus_per_node": 0}}).encode()
UPLOAD = LaunchRequest(
    run_id="quick-0123456789",
    source={"kind": "upload", "ref": "gs://configs/quick.json#1"},
    event_time=NOW - dt.timedelta(seconds=5),
    config_uri="gs://configs/quick.json",
)
MESSAGE = dataclasses.replace(UPLOAD, source={"kind": "message", "ref": "m-1"})


def request(base: LaunchRequest = UPLOAD, **changes) -> LaunchRequest:
    return dataclasses.replace(base, **changes)


CASES = [
    ("accepted", request(), Document(GOOD), None),
    ("its own errors", request(errors=["no run id in the event"]), None, "no run id in the event"),
    ("too old", request(event_time=NOW - dt.timedelta(hours=2)), None, "event is 7200s old"),
    ("a nightly without the key", request(source={"kind": "nightly", "ref": "n"}), None, "policy nightly_key"),
    ("a message naming the records", request(MESSAGE, config_uri="gs://runs-bucket/runs/x.json"), None, "runs/"),
    ("a message naming another bucket", request(MESSAGE, config_uri="gs://elsewhere/c.json"), None, "config_uri"),
    ("unreadable", request(), Document(unreadable="gs://configs/quick.json does not exist"), "does not exist"),
    ("not a config", request(), Document(b'{"name": "quick", "epochs": 3}'), "epochs"),
    (
        "against the policy",
        request(),
        Document(json.dumps({"name": "quick", "tracking": {"wandb": {}}}).encode()),
        "policy tracking_destinations",
    ),
]


@pytest.mark.parametrize(("case", "req", "document", "refused"), CASES, ids=[c[0] for c in CASES])
def test_the_launch_judge(case, req, document, refused):
    verdict = judge(req, document, RULES, NOW)
    assert verdict.accepted == (refused is None), (case, verdict.errors)
    if refused is None:
        assert verdict.config is not None and verdict.config.storage_path == "gs://runs-bucket/checkpoints"
        assert verdict.estimate is not None
    else:
        assert any(refused in error for error in verdict.errors), (case, verdict.errors)
    # Refused before reading exactly when the rules that need no document refuse it: never read for nothing.
    assert bool(before_reading(req, RULES, NOW)) == (document is None), case


def test_a_nightly_with_the_schedulers_key_is_judged_on_its_config():
    nightly = request(
        source={"kind": "nightly", "ref": "n"},
        config_uri="gs://runs-bucket/library/nightly.json",
        attributes={"raytune-nightly-key": "k3y"},
    )
    assert judge(nightly, Document(GOOD), RULES, NOW).accepted
