"""The versions of a run's dataset, as the controller can see them without downloading it: GCS object
generations under a gs:// location, the Hub's current revision of a dataset repo, size and modification
time of local files (the embedded local default), the built-in synthetic set's spec. What the trainer
reads (functions/core/fingerprint.py makes the nightly's fingerprint of it)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from functions.adapters.gcs import Bucket, split_uri
from functions.adapters.retry import with_retries
from functions.core import errors
from functions.core.config import DATA_FILE_SUFFIX, SAVED_MARKERS, DatasetSpec

HUB = "https://huggingface.co"
TIMEOUT_S = 10

Versions = list[tuple[str, str]]


def versions(spec: DatasetSpec, token: str | None = None) -> tuple[Versions | None, str | None]:
    """(object, version) pairs, or None and why the dataset has no version visible from here (then the
    night trains). A transient GCS error raises: the event's redelivery tries again."""
    if spec.id.startswith("tiny://"):
        return [(spec.id, "built-in")], None  # generated from the config alone
    if spec.id.startswith("gs://"):
        try:
            return _gcs(spec.id), None
        except (errors.PermanentError, errors.NotFound) as err:  # e.g. 403: the function may not list it
            return None, f"cannot list {spec.id}: {errors.describe(err)}"
    if spec.id.startswith("/"):
        return _local(Path(spec.id))
    return _hub(spec.id, token)


def _gcs(location: str) -> Versions:
    bucket, name = split_uri(location.rstrip("/"))
    if name.endswith(DATA_FILE_SUFFIX):
        return [(f"gs://{bucket}/{n}", str(g)) for n, g in Bucket(bucket).versions(name) if n == name]
    prefix = f"{name}/" if name else ""
    found = Bucket(bucket).versions(prefix)
    saved = any(n.removeprefix(prefix) in SAVED_MARKERS for n, _ in found)  # every file of it is the data
    return [(f"gs://{bucket}/{n}", str(g)) for n, g in found if saved or n.endswith(DATA_FILE_SUFFIX)]


def _local(path: Path) -> tuple[Versions | None, str | None]:
    if not path.exists():
        return None, f"{path} is not visible to the controller (a path inside the trainer's image)"
    if path.is_dir() and any((path / marker).is_file() for marker in SAVED_MARKERS):
        files = sorted(f for f in path.rglob("*") if f.is_file())
    else:
        files = sorted(path.rglob(f"*{DATA_FILE_SUFFIX}")) if path.is_dir() else [path]
    return [(str(f), f"{f.stat().st_size}:{f.stat().st_mtime_ns}") for f in files], None


def _hub(repo: str, token: str | None) -> tuple[Versions | None, str | None]:
    """The repo's current commit: a new upload to the dataset is a new revision."""
    import requests

    endpoint = os.environ.get("HF_ENDPOINT", HUB).rstrip("/")
    url = f"{endpoint}/api/datasets/{quote(repo, safe='/')}/revision/main"

    def call() -> str:
        try:
            response = requests.get(
                url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=TIMEOUT_S
            )
        except requests.RequestException as exc:
            raise errors.TransientError(f"{type(exc).__name__} reading {url}") from None
        if response.status_code != 200:
            raise errors.from_status(response.status_code, f"{url}: HTTP {response.status_code}")
        sha = response.json().get("sha")
        if not isinstance(sha, str) or not sha:
            raise errors.PermanentError(f"{url}: no revision in the answer")
        return sha

    try:
        return [(f"hf://datasets/{repo}", with_retries(call, f"revision of {repo}"))], None
    except (errors.ControllerError, ValueError) as err:  # ValueError: an answer that is not JSON
        # Unknown is not unchanged: the night trains (and says why it could not tell).
        return None, f"the Hub did not give the revision of {repo}: {err}"
