"""A config document's fields by their dotted names (`training.epochs`, `scaling.nodes`): the one setter that
`--set` (functions/cli/overrides.py) and a sweep's trials (functions/core/sweep.py) both use."""

from __future__ import annotations

from typing import Any


class NotASection(ValueError):
    """A dotted name runs through a value that is not a section."""


def with_value(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """The document with one dotted field set: the sections on its way copied (made where absent), the input
    untouched."""
    head, _, rest = path.partition(".")
    if not rest:
        return {**data, head: value}
    section = data.get(head, {})
    if not isinstance(section, dict):
        raise NotASection(head)
    return {**data, head: with_value(section, rest, value)}
