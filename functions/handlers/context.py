"""Everything a handler talks to, built once per process from the environment (GKE in the cloud),
or set explicitly by the embedded local default and the tests."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from functions.adapters import gcs
from functions.adapters.store import Allocations, RunStore, Stored
from functions.core import champion, fingerprint
from functions.core.platform import Platform
from functions.core.secrets import add_secret
from functions.handlers import logs
from functions.handlers.settings import Settings


class Publisher(Protocol):
    def publish(self, topic: str, message: dict[str, Any], **attributes: str) -> str: ...


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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
        self.allocations = Allocations(self.store.blobs)
        self.champions = Stored(self.store.blobs, champion.Champion, champion.path)
        self.nightlies = Stored(self.store.blobs, fingerprint.LastTrained, fingerprint.pointer_path)


_lock = threading.Lock()
_current: Context | None = None


def from_env() -> Context:
    from functions.adapters.gke import GkeClusters, GkePlatform
    from functions.adapters.pubsub import Publisher as PubSubPublisher
    from functions.core.manifests import owner_id

    settings = Settings.from_env()
    for secret in (settings.hf_token, settings.policy.nightly_key, settings.policy.operator_key):
        add_secret(secret)
    return Context(
        settings=settings,
        store=RunStore(gcs.Bucket(settings.bucket)),
        platform=GkePlatform(
            settings.project,
            settings.hf_token,
            clusters=GkeClusters(settings.project, create=settings.create_clusters, network=settings.network),
            owner=owner_id(settings.bucket),
        ),
        publisher=PubSubPublisher(),
    )


def current() -> Context:
    global _current
    with _lock:
        if _current is None:
            logs.setup()
            _current = from_env()
        return _current


def use(context: Context | None) -> None:
    """Install a context for this process (None: rebuild from the environment on next use)."""
    global _current
    with _lock:
        _current = context
