"""CloudEvents built in-process, where no Eventarc or Pub/Sub push delivers them: the embedded local
default, the benchmarks and the tests. The same shapes as the real deliveries."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

from functions.core.events import PUBSUB_PUBLISHED, STORAGE_FINALIZED


def object_finalized(
    bucket: str, name: str, generation: int | str, size: int | None = None, created: dt.datetime | None = None
) -> Any:
    from cloudevents.http import CloudEvent

    data = {"bucket": bucket, "name": name, "generation": str(generation)}
    if size is not None:
        data["size"] = str(size)
    if created is not None:
        data["timeCreated"] = created.isoformat()
    return CloudEvent(
        {
            "type": STORAGE_FINALIZED,
            "source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
            "id": f"{name}#{generation}",
            "subject": f"objects/{name}",
        },
        data,
    )


def message_published(
    body: dict[str, Any],
    message_id: str,
    topic: str = "projects/_/topics/raytune",
    published: dt.datetime | None = None,
) -> Any:
    from cloudevents.http import CloudEvent

    message = {"data": base64.b64encode(json.dumps(body).encode()).decode(), "messageId": message_id}
    if published is not None:
        message["publishTime"] = published.isoformat()
    return CloudEvent(
        {"type": PUBSUB_PUBLISHED, "source": f"//pubsub.googleapis.com/{topic}", "id": message_id}, {"message": message}
    )
