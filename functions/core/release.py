"""Which release this is, and what the releases a deployment may roll back to can read (docs/operating.md).

The version-skew rule, as Kubernetes keeps it for its API servers: a field is read by release N before release
N+1 writes it where release N looks. Cloud Functions lets an old instance finish while traffic moves to a new
one, and a rollback runs the old release again on what the new one wrote; so every object this release writes is
one that each release from OLDEST_READER on reads and acts on. A config field those releases do not know never
goes into a record's `config` (their RunConfig forbids unknown fields, and their store quarantines a record whose
config it cannot validate): the record's `config` is the run's config as placed in its region now, without them,
and the accepted config goes beside it in `accepted_config`, a key the older releases ignore and drop when they
rewrite the record. So an older release acts on the run as far as it can (it follows it where it is now, without
the newer features: it never moves it, its nodes pull the image) and a run it rewrote is, from then on, the run it
can carry out: nothing is quarantined, lost or launched twice.

The same rule holds for `accepted_config`, which releases from ACCEPTED_READER on read in place of `config`: it
never holds a field they do not know either. A field newer than ACCEPTED_READER goes in `config_extensions` (its
dotted path and value), which releases from EXTENSIONS_READER on read and merge back, every field of it; so it
holds only what EXTENSIONS_READER knows, as it knows it (`tracking` without `tracking.vertex`). A field newer than
that goes in `config_extensions_by_release` under the release that first reads it; a release merges back the
entries of itself and those before, and runs without the rest.

Raising OLDEST_READER (a release whose predecessors no deployment runs) moves its fields out of NEWER_FIELDS and
into `config`, as a feature gate turns on once no older reader serves.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_serializer

VERSION = "0.5.0"  # CHANGELOG.md's newest release; pyproject.toml reads it from here
OLDEST_READER = "0.1.0"  # the oldest release a deployment may roll back to (CHANGELOG.md names its commit)
ACCEPTED_READER = "0.3.0"  # the first release that reads a record's accepted_config over its config
EXTENSIONS_READER = "0.4.0"  # the first release that reads config_extensions (and merges all of it back)

# The config fields the releases from OLDEST_READER on cannot read, with the release that first reads each (a list
# element's field is `section.list[].field`). tests/integration/test_version_skew.py holds this table against the
# oldest reader's own JSON Schema: every field of today's config that its schema lacks is named here.
NEWER_FIELDS: dict[str, str] = {
    "cluster.fallback_regions": "0.2.0",
    "cluster.image_cache": "0.2.0",
    "deadlines.region_seconds": "0.2.0",
    "scaling.capacity[].region": "0.2.0",
    "tracking": "0.4.0",
    "tracking.vertex": "0.5.0",
}


def version_key(version: str) -> tuple[int, ...]:
    """A release's version as it orders: 0.10.0 after 0.9.0."""
    return tuple(int(part) for part in version.split("."))


def newer_than(reader: str) -> list[str]:
    """The fields release `reader` does not read."""
    return [field for field, since in NEWER_FIELDS.items() if version_key(since) > version_key(reader)]


def readable(config: dict[str, Any], reader: str = OLDEST_READER) -> dict[str, Any]:
    """`config` (a placed config, as stored) without the fields release `reader` does not know."""
    out = dict(config)
    for field in newer_than(reader):
        out = _without(out, field.split("."))
    return out


def extensions(config: dict[str, Any]) -> dict[str, Any]:
    """`config_extensions`: the fields ACCEPTED_READER does not read, as EXTENSIONS_READER knows them (by dotted
    path; none is a list element's)."""
    known = readable(config, EXTENSIONS_READER)
    return _fields(known, [f for f in newer_than(ACCEPTED_READER) if f not in newer_than(EXTENSIONS_READER)])


def extensions_by_release(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`config_extensions_by_release`: each field newer than EXTENSIONS_READER under the release that first reads
    it, as that release knows it."""
    found = {}
    for since in sorted({NEWER_FIELDS[f] for f in newer_than(EXTENSIONS_READER)}, key=version_key):
        introduced = [f for f in newer_than(EXTENSIONS_READER) if NEWER_FIELDS[f] == since]
        if fields := _fields(readable(config, since), introduced):
            found[since] = fields
    return found


def known_extensions(by_release: dict[str, Any]) -> dict[str, Any]:
    """The entries of `config_extensions_by_release` this release reads: its own and its predecessors'."""
    merged: dict[str, Any] = {}
    for since in sorted(by_release, key=version_key):
        if version_key(since) <= version_key(VERSION) and isinstance(by_release[since], dict):
            merged.update(by_release[since])
    return merged


def _fields(config: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    found = {}
    for field in fields:
        value: Any = config
        for key in field.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            found[field] = value
    return found


def extended(config: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """`config` with the extensions' fields set back at their paths."""
    out = dict(config)
    for field, value in fields.items():
        *parents, leaf = field.split(".")
        node = out
        for key in parents:
            node[key] = dict(node.get(key) or {})
            node = node[key]
        node[leaf] = value
    return out


def _without(doc: dict[str, Any], path: list[str]) -> dict[str, Any]:
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        key = head[:-2]
        items = doc.get(key)
        if not isinstance(items, list):
            return doc
        return {**doc, key: [_without(i, rest) if isinstance(i, dict) else i for i in items]}
    if not rest:
        return {k: v for k, v in doc.items() if k != head}
    inner = doc.get(head)
    return {**doc, head: _without(inner, rest)} if isinstance(inner, dict) else doc


class Stamped(BaseModel):
    """A stored object that says which release wrote it (older releases ignore the key)."""

    written_by: str | None = None  # as read: the release that wrote it (None: one before releases were versioned)

    @field_serializer("written_by")
    def by_this_release(self, _: str | None) -> str:
        return VERSION
