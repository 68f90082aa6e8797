"""Pub/Sub adapter: publish JSON messages (run-finished events, completion notices).

The client is created lazily and honours PUBSUB_EMULATOR_HOST by itself.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from functions.adapters.google_api import translate
from functions.adapters.retry import with_retries


@functools.cache
def _client() -> Any:
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient()


class Publisher:
    def publish(self, topic: str, message: dict[str, Any], **attributes: str) -> str:
        """Publish and wait for the server's message id (so a failure is seen and retried)."""
        data = json.dumps(message, sort_keys=True).encode()
        return with_retries(
            lambda: str(_client().publish(topic, data, **attributes).result(timeout=30)),
            f"publish to {topic}",
            translate=translate,
        )
