"""Deterministic run ids: the same event always names the same run, so duplicates collapse.

A run id is a DNS label of at most 40 characters; it names the run record and the RayJob
(KubeRay allows 47) and is the Ray job submission id.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re

MAX_LEN = 40
_HASH_LEN = 10


def _slug(text: str, limit: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = slug[:limit].strip("-")
    if not slug or not slug[0].isalpha():
        slug = ("r-" + slug)[:limit].strip("-")
    return slug


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:_HASH_LEN]


def _compose(prefix: str, key: str) -> str:
    return f"{_slug(prefix, MAX_LEN - _HASH_LEN - 1)}-{_digest(key)}"


def for_object(bucket: str, name: str, generation: int | str) -> str:
    """A config uploaded to gs://bucket/name: keyed by the object's generation (a re-upload is a new run)."""
    stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return _compose(stem, f"gs://{bucket}/{name}#{generation}")


def for_message(message_id: str, run_name: str | None = None) -> str:
    """A launch message from another system: keyed by the Pub/Sub message id (redeliveries share it)."""
    return _compose(run_name or "msg", f"pubsub:{message_id}")


def for_nightly(day: dt.date, run_name: str = "nightly") -> str:
    """A nightly line's run: one per line (its run name: Terraform's nightly_lines key, or its config's name) and
    calendar day (UTC), however often the scheduler fires; any number of lines run on one night."""
    return f"{_slug(run_name, MAX_LEN - 9)}-{day:%Y%m%d}"


_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,23}[a-z0-9])?$")
_ID = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


def is_valid_name(name: str) -> bool:
    """A run name given by another system: short enough to leave room for the hash."""
    return bool(_NAME.match(name))


def is_valid_id(run_id: str) -> bool:
    return bool(_ID.match(run_id))
