"""CloudEvents as Eventarc and Pub/Sub push deliver them, posted over HTTP to functions-framework."""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid

import requests

STORAGE = "google.cloud.storage.object.v1.finalized"
PUBSUB = "google.cloud.pubsub.topic.v1.messagePublished"


def _iso(when: dt.datetime | None) -> str:
    return (when or dt.datetime.now(dt.UTC)).isoformat().replace("+00:00", "Z")


def storage_event(
    bucket: str,
    name: str,
    generation: int | str,
    size: int = 100,
    when: dt.datetime | None = None,
    event_id: str | None = None,
    metadata: dict[str, str] | None = None,
) -> tuple[dict, bytes]:
    """Binary-mode CloudEvent of an object finalize; int64 fields as strings, as GCS sends them; the object's
    custom metadata as `metadata`."""
    data = {
        "bucket": bucket,
        "name": name,
        "generation": str(generation),
        "metageneration": "1",
        "contentType": "application/json",
        "size": str(size),
        "timeCreated": _iso(when),
        "updated": _iso(when),
        "md5Hash": "",
        "metadata": metadata or {},
    }
    headers = {
        "ce-id": event_id or str(uuid.uuid4()),
        "ce-specversion": "1.0",
        "ce-type": STORAGE,
        "ce-source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "ce-subject": f"objects/{name}",
        "ce-time": _iso(when),
        "Content-Type": "application/json",
    }
    return headers, json.dumps(data).encode()


def pubsub_event(
    body: dict | bytes,
    message_id: str | None = None,
    when: dt.datetime | None = None,
    topic: str = "projects/raytune-test/topics/launch",
) -> tuple[dict, bytes]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    message_id = message_id or str(uuid.uuid4().int)[:16]
    data = {
        "message": {
            "data": base64.b64encode(raw).decode(),
            "attributes": {},
            "messageId": message_id,
            "publishTime": _iso(when),
        },
        "subscription": "projects/raytune-test/subscriptions/launch-sub",
    }
    headers = {
        "ce-id": message_id,
        "ce-specversion": "1.0",
        "ce-type": PUBSUB,
        "ce-source": f"//pubsub.googleapis.com/{topic}",
        "ce-time": _iso(when),
        "Content-Type": "application/json",
    }
    return headers, json.dumps(data).encode()


def post(url: str, event: tuple[dict, bytes]) -> requests.Response:
    headers, body = event
    return requests.post(url, headers=headers, data=body, timeout=60)
