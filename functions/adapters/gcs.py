"""Cloud Storage adapter: the run-record bucket (with generation preconditions) and reads of gs:// URIs.

The client is created lazily (cold starts stay fast) and honours STORAGE_EMULATOR_HOST.
Local absolute paths are read from disk: the embedded local default keeps checkpoints in a folder.
Client exceptions leave this module as functions.core.errors.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from functions.adapters.google_api import translate
from functions.adapters.retry import with_retries
from functions.core import errors

TIMEOUT_S = (5.0, 30.0)  # connect, read: every call has both
T = TypeVar("T")


class Listed(NamedTuple):
    """One object of a listing: what the list call returns about it without reading it."""

    name: str
    created: dt.datetime
    generation: int
    metadata: dict[str, str]


def _created(blob: Any) -> dt.datetime:
    """The blob's timeCreated as Blob.time_created reads it, without its strptime (a tenth of a quiet tick's CPU
    at 1,000 live runs): GCS writes RFC 3339 in UTC ("2026-12-05T23:24:38.123Z"), which fromisoformat reads."""
    stamp = blob._properties.get("timeCreated")
    return dt.datetime.fromisoformat(stamp) if stamp else blob.time_created


POOL_SIZE = 32  # connections kept per host: the watcher reads records from many threads at once


@functools.cache
def storage_client() -> Any:
    """One client per process, made on first use (cold starts stay fast); the client is thread-safe and
    keeps enough connections for the watcher's parallel reads."""
    import os

    import google.auth
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import storage
    from requests.adapters import HTTPAdapter

    # google-cloud-storage (3.x) otherwise reads the metadata of every bucket it touches in a background thread,
    # for OpenTelemetry trace attributes we do not export (google/cloud/storage/_bucket_metadata_cache.py):
    # a storage.buckets.get that no identity here is granted, refused (and audit-logged) on each cold start.
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        credentials, project = AnonymousCredentials(), os.environ.get("RAYTUNE_PROJECT", "local")
    else:
        credentials, project = google.auth.default()
    session = AuthorizedSession(credentials)
    for scheme in ("http://", "https://"):
        session.mount(scheme, HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE))
    return storage.Client(project=project, credentials=credentials, _http=session)


def split_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri}")
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return bucket, name


def read_uri(uri: str, limit: int | None = None) -> bytes:
    """Bytes of a gs:// object (`#generation` pins a version) or a local file; NotFound when absent,
    TooLarge when over `limit` bytes (never downloaded whole)."""
    if not uri.startswith("gs://"):
        path = Path(uri)
        if not path.is_file():
            raise errors.NotFound(uri)
        if limit is not None and path.stat().st_size > limit:
            raise errors.TooLarge(f"{uri} is larger than {limit} bytes")
        return path.read_bytes()
    location, _, generation = uri.partition("#")
    bucket, name = split_uri(location)
    if generation and not generation.isdigit():
        raise errors.PermanentError(f"{uri}: the generation after # must be a number")
    found = Bucket(bucket).read(name, int(generation) if generation else None, limit=limit)
    if found is None:
        raise errors.NotFound(uri)
    if limit is not None and len(found[0]) > limit:
        raise errors.TooLarge(f"{uri} is larger than {limit} bytes")
    return found[0]


class Bucket:
    """The Blobs protocol of functions/adapters/store.py over one GCS bucket."""

    def __init__(self, name: str):
        self.name = name

    @functools.cached_property
    def _bucket(self) -> Any:
        return storage_client().bucket(self.name)

    def _retried(self, call: Any, what: str) -> Any:
        return with_retries(call, f"{what} gs://{self.name}", translate=translate)

    def read(self, path: str, generation: int | None = None, limit: int | None = None) -> tuple[bytes, int] | None:
        """The object's bytes (at most limit + 1 of them: enough to tell it is too large) and generation."""

        def call() -> tuple[bytes, int] | None:
            blob = self._bucket.blob(path, generation=generation)
            try:
                data = blob.download_as_bytes(end=limit, timeout=TIMEOUT_S)  # end=None: the whole object
            except Exception as exc:
                if isinstance(translate(exc), errors.NotFound):
                    return None
                raise
            return data, int(blob.generation)

        return self._retried(call, f"read {path} in")

    def write(self, path: str, data: bytes, if_generation_match: int, metadata: dict[str, str] | None = None) -> int:
        """A new generation of the object (`if_generation_match` 0: only if absent), with `metadata` as its custom
        metadata (a new generation keeps none of the one it replaces)."""

        def call() -> int:
            blob = self._bucket.blob(path)
            if metadata:
                blob.metadata = metadata
            blob.upload_from_string(
                data, content_type="application/json", if_generation_match=if_generation_match, timeout=TIMEOUT_S
            )
            return int(blob.generation)

        # A retried upload whose first attempt landed fails its precondition (Conflict): the caller
        # re-reads on Conflict, so that case is safe.
        return self._retried(call, f"write {path} in")

    def copy(self, source: str, destination: str) -> None:
        """A server-side copy (the bytes never pass through this process); nothing when the source is gone."""

        def call() -> None:
            try:
                self._bucket.copy_blob(self._bucket.blob(source), self._bucket, destination, timeout=TIMEOUT_S)
            except Exception as exc:
                if not isinstance(translate(exc), errors.NotFound):
                    raise

        self._retried(call, f"copy {source} to {destination} in")

    def delete(self, path: str) -> None:
        def call() -> None:
            try:
                self._bucket.blob(path).delete(timeout=TIMEOUT_S)
            except Exception as exc:
                if not isinstance(translate(exc), errors.NotFound):
                    raise

        self._retried(call, f"delete {path} in")

    def _list(self, prefix: str, fields: Callable[[Any], T]) -> list[T]:
        """`fields` of every object under `prefix` (one list call)."""
        return self._retried(
            lambda: [fields(b) for b in storage_client().list_blobs(self.name, prefix=prefix, timeout=TIMEOUT_S)],
            f"list {prefix} in",
        )

    def listing(self, prefix: str) -> list[Listed]:
        """Every object under `prefix` with its creation time, generation and custom metadata (one list call)."""
        return self._list(prefix, lambda b: Listed(b.name, _created(b), int(b.generation), dict(b.metadata or {})))

    def versions(self, prefix: str) -> list[tuple[str, int]]:
        """Names and generations under `prefix` (what a dataset fingerprint is made of)."""
        return self._list(prefix, lambda b: (b.name, int(b.generation)))

    def list(self, prefix: str) -> list[str]:
        return [entry.name for entry in self.listing(prefix)]
