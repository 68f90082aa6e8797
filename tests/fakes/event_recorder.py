"""client-go's event recorder as the KubeRay operator uses it (k8s.io/client-go tools/record events_cache.go,
EventCorrelator.EventCorrelate): what reaches the API server of the Events an operator records.

In its order:
  * aggregation (EventAggregator, keyed by EventAggregatorByReasonFunc: source, involved object, type and reason,
    the message left out): from the 10th distinct message for one key within 10 minutes, the Event is replaced by
    one named by that key whose message is "(combined from similar events): " and the newest message;
  * correlation (eventLogger): an Event whose key (with its message) was recorded before is a patch of that Event:
    its count goes up and its lastTimestamp moves;
  * the spam filter (EventSourceObjectSpamFilter, keyed by getSpamKey: source and involved object): a token bucket
    of 25 (defaultSpamBurst) refilled at one every 5 minutes (defaultSpamQPS 1/300) per key; an Event (a new one
    or a patch) finding the bucket empty is dropped, never written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

BURST = 25  # defaultSpamBurst
REFILL_S = 300.0  # 1 / defaultSpamQPS
AGGREGATE_MAX = 10  # defaultAggregateMaxEvents
AGGREGATE_WINDOW_S = 600  # defaultAggregateIntervalInSeconds
COMBINED = "(combined from similar events): "


@dataclasses.dataclass
class _Bucket:
    tokens: float
    at: dt.datetime


@dataclasses.dataclass
class _Aggregate:
    messages: set[str]
    last: dt.datetime


class EventRecorder:
    """One operator's recorder (its source component). `write(name, event)` creates or replaces an Event object;
    `record` answers the Event written, or None where the spam filter dropped it."""

    def __init__(self, component: str, clock: Callable[[], dt.datetime], write: Callable[[str, dict], None]):
        self.component = component
        self.clock = clock
        self.write = write
        self.buckets: dict[tuple, _Bucket] = {}
        self.aggregates: dict[tuple, _Aggregate] = {}
        self.seen: dict[tuple, dict] = {}  # event key -> the Event as last written
        self.dropped = 0

    def record(self, involved: dict, reason: str, message: str, kind: str = "Normal") -> dict | None:
        now = self.clock()
        obj = tuple(involved.get(k, "") for k in ("kind", "namespace", "name", "uid", "apiVersion"))
        aggregate_key = (self.component, *obj, kind, reason)
        aggregate = self.aggregates.get(aggregate_key)
        if aggregate is None or (now - aggregate.last).total_seconds() > AGGREGATE_WINDOW_S:
            aggregate = _Aggregate(set(), now)
        aggregate.messages.add(message)
        aggregate.last = now
        self.aggregates[aggregate_key] = aggregate
        key: tuple = (*aggregate_key, message)
        if len(aggregate.messages) >= AGGREGATE_MAX:
            aggregate.messages.pop()
            key, message = aggregate_key, COMBINED + message
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        before = self.seen.get(key)
        if before is not None:
            event = {**before, "count": before.get("count", 1) + 1, "lastTimestamp": stamp, "message": message}
        else:
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                # client-go names it by the recorder clock's nanoseconds; a frozen test clock needs the count too
                "metadata": {"name": f"{involved.get('name')}.{int(now.timestamp() * 1e9) + len(self.seen):x}"},
                "involvedObject": dict(involved),
                "reason": reason,
                "message": message,
                "type": kind,
                "source": {"component": self.component},
                "count": 1,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
            }
        if not self._accepted((self.component, *obj), now):
            self.dropped += 1
            return None
        self.seen[key] = event
        self.write(event["metadata"]["name"], event)
        return event

    def _accepted(self, spam_key: tuple, now: dt.datetime) -> bool:
        """The token bucket of one source and object (flowcontrol's passive token bucket)."""
        bucket = self.buckets.setdefault(spam_key, _Bucket(float(BURST), now))
        bucket.tokens = min(float(BURST), bucket.tokens + (now - bucket.at).total_seconds() / REFILL_S)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True
