"""Everything a handler talks to, built once per process from the environment (GKE in the cloud),
or set explicitly by the embedded local default and the tests."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from functions.adapters import gcs
from functions.adapters.store import Allocations, RunStore, Stored
from functions.core import allocation, champion, fingerprint, release
from functions.core.allocation import Allocation
from functions.core.config import ClusterSpec
from functions.core.platform import Platform
from functions.core.runs import State
from functions.core.secrets import add_secret
from functions.handlers import logs
from functions.handlers.settings import Settings

log = logging.getLogger(__name__)


class Publisher(Protocol):
    def publish(self, topic: str, message: dict[str, Any], **attributes: str) -> str: ...


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def champion_pointers(store: RunStore) -> Stored[champion.Champion]:
    """Each line's champion pointer, beside the run records in the runs bucket."""
    return Stored(store.blobs, champion.Champion, champion.path)


@dataclass
class Context:
    settings: Settings
    store: RunStore
    platform: Platform
    publisher: Publisher
    read_uri: Callable[..., bytes] = gcs.read_uri  # (uri, limit=None)
    clock: Callable[[], dt.datetime] = utcnow
    sleep: Callable[[float], None] = field(default=time.sleep)
    # Beside the run records, in the same bucket:
    allocations: Allocations = field(init=False)
    champions: Stored[champion.Champion] = field(init=False)
    nightlies: Stored[fingerprint.LastTrained] = field(init=False)

    def __post_init__(self) -> None:
        self.allocations = Allocations(self.store.blobs, rebuild=self._rebuilt_allocation, pause=self.sleep)
        self.champions = champion_pointers(self.store)
        self.nightlies = Stored(self.store.blobs, fingerprint.LastTrained, fingerprint.pointer_path)

    def _rebuilt_allocation(self, spec: ClusterSpec, why: str) -> Allocation:
        """An unreadable allocation made again from the live runs of its RayCluster and the stamp it carries."""
        key = allocation.key_path(spec)
        live, full = [], spec
        for record in self.store.active():
            cfg = record.run_config() if record.config else None
            if cfg is None or record.state.terminal or allocation.key_path(cfg.cluster) != key:
                continue
            full = cfg.cluster  # every field of the spec, as the runs gave it (the object's name has four)
            admitted = record.state in (State.PROVISIONING, State.SUBMITTED, State.RUNNING)
            live.append(allocation.LiveRun(record.run_id, cfg.group_nodes, record.created_at, admitted))
        workers = self.platform.workers(full)
        rebuilt = allocation.rebuilt(full, live, workers.stamp if workers else 0, self.clock())
        what = (
            f"allocation of RayCluster {spec.namespace}/{spec.ray_cluster} was unreadable ({why}): moved to "
            f"quarantine/clusters/ and rebuilt from {len(live)} live runs (holders {rebuilt.holders}, "
            f"{len(rebuilt.queue)} queued)"
        )
        log.error("%s", what)
        if self.settings.events_topic:
            event = {"event": "allocation-rebuilt", "state": "QUARANTINED", "reason": what}
            self.publisher.publish(self.settings.events_topic, event, state="QUARANTINED", event="allocation-rebuilt")
        return rebuilt


_lock = threading.Lock()
_current: Context | None = None


def from_env() -> Context:
    from functions.adapters.gke import GkePlatform
    from functions.adapters.gke_clusters import GkeClusters
    from functions.adapters.pubsub import Publisher as PubSubPublisher
    from functions.core.manifests import owner_id

    settings = Settings.from_env()
    for secret in (
        settings.hf_token,
        settings.policy.nightly_key,
        settings.policy.operator_key,
        *settings.tracking_credentials.values(),
    ):
        add_secret(secret)
    return Context(
        settings=settings,
        store=RunStore(gcs.Bucket(settings.bucket)),
        platform=GkePlatform(
            settings.project,
            settings.hf_token,
            clusters=GkeClusters(settings.project, create=settings.create_clusters, network=settings.network),
            owner=owner_id(settings.bucket),
            credentials=settings.tracking_credentials,
        ),
        publisher=PubSubPublisher(),
    )


def current() -> Context:
    global _current
    with _lock:
        if _current is None:
            logs.setup()
            _current = from_env()
            # Which release this instance serves: during an upgrade or a rollback two may serve at once.
            log.info("raytune %s serving", release.VERSION, extra={"release": release.VERSION})
        return _current


def use(context: Context | None) -> None:
    """Install a context for this process (None: rebuild from the environment on next use)."""
    global _current
    with _lock:
        _current = context
