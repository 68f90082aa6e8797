"""Cloud Storage adapter: the run-record bucket (with generation preconditions) and reads of gs:// URIs.

The client is created lazily (cold starts stay fast) and honours STORAGE_EMULATOR_HOST.
Local absolute paths are read from disk: the embedded local default keeps checkpoints in a folder.
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

from functions.retry import with_retries
from functions.runs import Conflict


@functools.cache
def storage_client():
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


class NotFound(Exception):
    pass


def read_uri(uri: str) -> bytes:
    """Bytes of a gs:// object (`#generation` pins a version) or a local file; NotFound when absent."""
    if not uri.startswith("gs://"):
        path = Path(uri)
        if not path.is_file():
            raise NotFound(uri)
        return path.read_bytes()
    location, _, generation = uri.partition("#")
    bucket, name = split_uri(location)
    found = Bucket(bucket).read(name, int(generation) if generation else None)
    if found is None:
        raise NotFound(uri)
    return found[0]


class Bucket:
    """The Blobs protocol of functions/runs.py over one GCS bucket."""

    def __init__(self, name: str):
        self.name = name

    @functools.cached_property
    def _bucket(self):
        return storage_client().bucket(self.name)

    def read(self, path: str, generation: int | None = None) -> tuple[bytes, int] | None:
        from google.api_core.exceptions import NotFound as GcsNotFound

        def call():
            blob = self._bucket.blob(path, generation=generation)
            try:
                data = blob.download_as_bytes()
            except GcsNotFound:
                return None
            return data, int(blob.generation)

        return with_retries(call, f"read gs://{self.name}/{path}")

    def write(self, path: str, data: bytes, if_generation_match: int) -> int:
        from google.api_core.exceptions import PreconditionFailed

        def call():
            blob = self._bucket.blob(path)
            try:
                blob.upload_from_string(data, content_type="application/json",
                                        if_generation_match=if_generation_match)
            except PreconditionFailed as err:
                raise Conflict(f"gs://{self.name}/{path} changed") from err
            return int(blob.generation)

        # A retried upload whose first attempt landed fails its precondition: the caller
        # re-reads on Conflict, so that case is safe.
        return with_retries(call, f"write gs://{self.name}/{path}")

    def delete(self, path: str) -> None:
        from google.api_core.exceptions import NotFound as GcsNotFound

        def call():
            try:
                self._bucket.blob(path).delete()
            except GcsNotFound:
                pass

        with_retries(call, f"delete gs://{self.name}/{path}")

    def listing(self, prefix: str) -> list[tuple[str, dt.datetime]]:
        """Names and creation times under `prefix` (one list call)."""
        return with_retries(lambda: [(b.name, b.time_created) for b in storage_client().list_blobs(self.name, prefix=prefix)],
                            f"list gs://{self.name}/{prefix}")

    def list(self, prefix: str) -> list[str]:
        return [name for name, _ in self.listing(prefix)]
