"""Cloud Storage adapter: the run-record bucket (with generation preconditions) and reads of gs:// URIs.

The client is created lazily (cold starts stay fast) and honours STORAGE_EMULATOR_HOST.
Local absolute paths are read from disk: the embedded local default keeps checkpoints in a folder.
Client exceptions leave this module as functions.core.errors.
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import Any

from functions.adapters.google_api import translate
from functions.adapters.retry import with_retries
from functions.core import errors


@functools.cache
def storage_client() -> Any:
    """One client per process, made on first use (cold starts stay fast); the client is thread-safe."""
    import os

    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=os.environ.get("RAYTUNE_PROJECT", "local"), credentials=AnonymousCredentials())
    return storage.Client()


def split_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri}")
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return bucket, name


def read_uri(uri: str) -> bytes:
    """Bytes of a gs:// object (`#generation` pins a version) or a local file; NotFound when absent."""
    if not uri.startswith("gs://"):
        path = Path(uri)
        if not path.is_file():
            raise errors.NotFound(uri)
        return path.read_bytes()
    location, _, generation = uri.partition("#")
    bucket, name = split_uri(location)
    found = Bucket(bucket).read(name, int(generation) if generation else None)
    if found is None:
        raise errors.NotFound(uri)
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

    def read(self, path: str, generation: int | None = None) -> tuple[bytes, int] | None:
        def call() -> tuple[bytes, int] | None:
            blob = self._bucket.blob(path, generation=generation)
            try:
                data = blob.download_as_bytes()
            except Exception as exc:
                if isinstance(translate(exc), errors.NotFound):
                    return None
                raise
            return data, int(blob.generation)

        return self._retried(call, f"read {path} in")

    def write(self, path: str, data: bytes, if_generation_match: int) -> int:
        def call() -> int:
            blob = self._bucket.blob(path)
            blob.upload_from_string(data, content_type="application/json", if_generation_match=if_generation_match)
            return int(blob.generation)

        # A retried upload whose first attempt landed fails its precondition (Conflict): the caller
        # re-reads on Conflict, so that case is safe.
        return self._retried(call, f"write {path} in")

    def delete(self, path: str) -> None:
        def call() -> None:
            try:
                self._bucket.blob(path).delete()
            except Exception as exc:
                if not isinstance(translate(exc), errors.NotFound):
                    raise

        self._retried(call, f"delete {path} in")

    def listing(self, prefix: str) -> list[tuple[str, dt.datetime]]:
        """Names and creation times under `prefix` (one list call)."""
        return self._retried(
            lambda: [(b.name, b.time_created) for b in storage_client().list_blobs(self.name, prefix=prefix)],
            f"list {prefix} in",
        )

    def list(self, prefix: str) -> list[str]:
        return [name for name, _ in self.listing(prefix)]
