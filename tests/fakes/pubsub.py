"""Topics and pull subscriptions on the Pub/Sub emulator."""

from __future__ import annotations

import uuid

PROJECT = "raytune-test"


class PubSub:
    """Topics and pull subscriptions on the emulator."""

    def __init__(self):
        from google.cloud import pubsub_v1

        self.publisher = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()

    def topic(self, name: str) -> str:
        path = self.publisher.topic_path(PROJECT, f"{name}-{uuid.uuid4().hex[:6]}")
        self.publisher.create_topic(name=path)
        return path

    def subscribe(self, topic: str, push_endpoint: str | None = None) -> str:
        from google.cloud import pubsub_v1

        path = self.subscriber.subscription_path(PROJECT, f"sub-{uuid.uuid4().hex[:8]}")
        request = {"name": path, "topic": topic, "ack_deadline_seconds": 10}
        if push_endpoint:
            request["push_config"] = pubsub_v1.types.PushConfig(push_endpoint=push_endpoint)
        self.subscriber.create_subscription(request=request)
        return path

    def pull(self, subscription: str, max_messages: int = 50) -> list:
        response = self.subscriber.pull(
            subscription=subscription, max_messages=max_messages, timeout=10, return_immediately=True
        )
        if response.received_messages:
            self.subscriber.acknowledge(
                subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages]
            )
        return [m.message for m in response.received_messages]
