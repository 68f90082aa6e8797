"""Pub/Sub adapter: publish JSON messages (run-finished events, completion notices).

The client is created lazily and honours PUBSUB_EMULATOR_HOST by itself.
"""

from __future__ import annotations

import json
import threading

from functions.retry import with_retries

_lock = threading.Lock()
_publisher = None


def _client():
    global _publisher
    with _lock:
        if _publisher is None:
            from google.cloud import pubsub_v1

            _publisher = pubsub_v1.PublisherClient()
        return _publisher


class Publisher:
    def publish(self, topic: str, message: dict, **attributes: str) -> str:
        """Publish and wait for the server's message id (so a failure is seen and retried)."""
        data = json.dumps(message, sort_keys=True).encode()
        return with_retries(lambda: _client().publish(topic, data, **attributes).result(timeout=30),
                            f"publish to {topic}")
