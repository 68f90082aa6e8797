"""CloudEvents to requests, on payloads shaped as Eventarc and Pub/Sub push deliver them (int64 fields as
strings, base64 data, extra fields the controller does not use), without any server."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest
from cloudevents.http import CloudEvent

from functions.core import events, runids

STORAGE_DATA = {  # a real finalize payload's fields (Eventarc's StorageObjectData sample), our names
    "bucket": "raytune-configs",
    "contentType": "application/json",
    "crc32c": "rTVTeQ==",
    "etag": "CNHZkbuF/ugCEAE=",
    "generation": "1587627537231057",
    "id": "raytune-configs/configs/shop.json/1587627537231057",
    "kind": "storage#object",
    "md5Hash": "kF8MuJ5+CTJxvyhHS1xzRg==",
    "metageneration": "1",
    "name": "configs/shop.json",
    "size": "352",
    "storageClass": "STANDARD",
    "timeCreated": "2026-12-02T07:38:57.230Z",
    "updated": "2026-12-02T07:38:57.230Z",
}


def storage(data: dict, **attributes) -> CloudEvent:
    return CloudEvent(
        {
            "type": events.STORAGE_FINALIZED,
            "source": "//storage.googleapis.com/projects/_/buckets/b",
            "id": "1",
            "time": data.get("timeCreated"),
            **attributes,
        },
        data,
    )


def published(
    body: bytes | dict,
    message_id: str = "message-id",
    publish_time: str = "2026-12-02T04:06:14.109Z",
    attributes: dict[str, str] | None = None,
):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    data = {
        "subscription": "projects/p/subscriptions/s",
        "message": {
            "@type": "type.googleapis.com/google.pubsub.v1.PubsubMessage",
            "attributes": {"attr1": "attr1-value", **(attributes or {})},
            "data": base64.b64encode(raw).decode(),
            "messageId": message_id,
            "publishTime": publish_time,
        },
    }
    return CloudEvent(
        {"type": events.PUBSUB_PUBLISHED, "source": "//pubsub.googleapis.com/projects/p/topics/t", "id": message_id},
        data,
    )


def test_upload_names_its_run_by_object_and_generation():
    request = events.launch_request(storage(STORAGE_DATA))
    assert request.run_id == runids.for_object("raytune-configs", "configs/shop.json", "1587627537231057")
    assert request.run_id.startswith("shop-") and runids.is_valid_id(request.run_id)
    assert request.config_uri == "gs://raytune-configs/configs/shop.json#1587627537231057"
    assert request.source == {"kind": "upload", "ref": request.config_uri}
    assert request.event_time == dt.datetime(2026, 12, 2, 7, 38, 57, 230000, tzinfo=dt.UTC)
    assert request.errors == []


@pytest.mark.parametrize("name", ["runs/x.json", "configs/readme.txt", "checkpoints/a/result.json"])
def test_other_objects_are_ignored(name):
    with pytest.raises(events.Ignored):
        events.launch_request(storage({**STORAGE_DATA, "name": name}))


def test_oversized_upload_is_an_error_from_the_event_alone():
    request = events.launch_request(storage({**STORAGE_DATA, "size": str(10**9)}))
    assert request.config_uri is None and "the limit is 65536" in request.errors[0]


def test_inline_config_message():
    request = events.launch_request(published({"config": {"name": "x"}, "run_name": "crm"}))
    assert request.config == {"name": "x"} and request.run_id.startswith("crm-")
    assert request.source == {"kind": "message", "ref": "pubsub:message-id"}


def test_redeliveries_of_a_message_name_one_run():
    first = events.launch_request(published({"config": {}}, message_id="42"))
    again = events.launch_request(published({"config": {}}, message_id="42", publish_time="2026-12-03T00:00:00Z"))
    assert first.run_id == again.run_id


def test_nightly_runs_once_a_day():
    morning = events.launch_request(
        published({"config_uri": "gs://b/n.json", "nightly": True}, "1", "2026-12-02T01:00:00Z")
    )
    evening = events.launch_request(
        published({"config_uri": "gs://b/n.json", "nightly": True}, "2", "2026-12-02T23:00:00Z")
    )
    assert morning.run_id == evening.run_id == "n-20261202" and morning.source["kind"] == "nightly"


@pytest.mark.parametrize(
    ("body", "run_id"),
    [
        ({"config_uri": "gs://b/library/shop.yaml", "nightly": True}, "shop-20261202"),
        ({"config_uri": "gs://b/library/toys.json#7", "nightly": True}, "toys-20261202"),
        ({"config_uri": "gs://b/library/shop.yaml", "nightly": True, "run_name": "nightly"}, "nightly-20261202"),
        ({"config": {"name": "garden"}, "nightly": True}, "garden-20261202"),
        ({"config": {}, "nightly": True}, "nightly-20261202"),
    ],
)
def test_each_nightly_line_has_a_run_of_its_own_each_night(body, run_id):
    """A nightly's run carries its line's name: its run_name (Terraform's nightly_lines key), else its config's
    (issue 67): two nightly configs on one night are two runs, never one reporting the other's end."""
    assert events.launch_request(published(body, "1", "2026-12-02T02:00:00Z")).run_id == run_id


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"\x00 not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        ({}, "exactly one of"),
        ({"config": {}, "config_uri": "gs://b/x"}, "exactly one of"),
        ({"config": "text"}, "must be a JSON object"),
        ({"config_uri": "http://elsewhere/x"}, "must be gs://BUCKET/OBJECT"),
        ({"config_uri": "gs:///x"}, "must be gs://BUCKET/OBJECT"),
        ({"config_uri": "gs://-bad-/x"}, "must be gs://BUCKET/OBJECT"),
        ({"config_uri": "gs://b-1/x.json#fragment"}, "must be gs://BUCKET/OBJECT"),
        (b"[" * 10_000, "nested 10000 levels deep"),
        (b'{"config": {"training": {"seed": ' + b"9" * 5000 + b"}}}", "a number of 5000 characters"),
        ({"config": {}, "run_name": "Not A Label"}, "run_name"),
    ],
)
def test_bad_messages_carry_their_reason(body, error):
    request = events.launch_request(published(body))
    assert any(error in e for e in request.errors), request.errors
    assert request.config is None and request.config_uri is None


@pytest.mark.parametrize(
    ("body", "kind", "run_id"),
    [
        ({"kind": "tick"}, "tick", None),
        ({}, "tick", None),
        ({"kind": "cancel", "run_id": "shop-0123456789", "source": "pubsub:1"}, "cancel", "shop-0123456789"),
        ({"kind": "finished", "run_id": "shop-0123456789", "outcome": "succeeded"}, "finished", "shop-0123456789"),
    ],
)
def test_watch_messages(body, kind, run_id):
    request = events.watch_request(published(body))
    assert (request.kind, request.run_id, request.token) == (kind, run_id, None)


def test_a_cancel_carries_its_token_and_a_launch_its_digest():
    from functions.core.policy import CANCEL_DIGEST_ATTRIBUTE, cancel_digest

    request = events.watch_request(published({"kind": "cancel", "run_id": "shop-0123456789", "token": "t0k"}))
    assert request.token == "t0k"
    digest = cancel_digest("t0k")
    launch = events.launch_request(published({"config": {}}, attributes={CANCEL_DIGEST_ATTRIBUTE: digest}))
    assert launch.source["cancel_digest"] == digest
    bad = events.launch_request(published({"config": {}}, attributes={CANCEL_DIGEST_ATTRIBUTE: "not-a-digest"}))
    assert "cancel_digest" not in bad.source
    # Issue 39: a malformed digest is refused (REJECTED), never a run launched without one (anyone's to cancel).
    assert bad.errors == [
        f"message attribute {CANCEL_DIGEST_ATTRIBUTE}: not a SHA-256 digest as 64 lowercase hex characters"
    ]


@pytest.mark.parametrize("body", [{"kind": "reboot"}, {"kind": "cancel"}, {"kind": "cancel", "run_id": "../../x"}])
def test_watch_messages_we_do_not_act_on(body):
    with pytest.raises(events.Ignored):
        events.watch_request(published(body))


@pytest.mark.parametrize("data", [123, 1.5, True, ["x"], {"a": 1}])
def test_message_data_that_is_not_base64_text_is_a_reason_not_a_500(data):
    """Issue 21: `data` as a number raised TypeError in b64decode, so every delivery answered 500 (a retry storm).
    A launch message with a message id is a REJECTED record naming why; a watch message is ignored with it."""
    event = published({})
    event.data["message"]["data"] = data
    request = events.launch_request(event)
    assert request.errors == [f"message data is a JSON {type(data).__name__}, not base64 text"]
    with pytest.raises(events.Ignored, match="not base64 text"):
        events.watch_request(event)
