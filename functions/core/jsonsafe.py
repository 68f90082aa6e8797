"""JSON from strangers: nesting depth and number length are checked before or while parsing, so a
document 10,000 levels deep or an integer of 5,000 digits is a clear error, never a RecursionError or a
stalled parse."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32
MAX_NUMBER_CHARS = 40


class UnsafeJson(ValueError):
    pass


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects, strings skipped."""
    deepest = current = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            current += 1
            deepest = max(deepest, current)
        elif char in "]}":
            current -= 1
    return deepest


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise UnsafeJson(f"a number of {len(text)} characters; at most {MAX_NUMBER_CHARS}")
        return kind(text)

    return parse


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are each given once: a key given twice is refused (json.loads would keep the last,
    silently dropping what the writer also meant)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise UnsafeJson(f"the key {key[:80]!r} is given twice in one object")
        found[key] = value
    return found


def loads(raw: bytes | str) -> Any:
    """json.loads with limits, and no key twice in one object; raises ValueError (json.JSONDecodeError or
    UnsafeJson) for bad input."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    if (found := depth(text)) > MAX_DEPTH:
        raise UnsafeJson(f"nested {found} levels deep; at most {MAX_DEPTH}")
    return json.loads(text, parse_int=_number(int), parse_float=_number(float), object_pairs_hook=_unique)
