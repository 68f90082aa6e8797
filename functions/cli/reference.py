"""The run config reference (docs/config-reference.md), generated from the JSON Schema so it never drifts: each
field's description is its docstring in functions/core/config.py."""

from __future__ import annotations

import json
from typing import Any

LIMITS = (
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("minItems", ">= {} items"),
    ("maxItems", "<= {} items"),
    ("maxProperties", "<= {} entries"),
    ("pattern", "pattern `{}`"),
)


def _kind(node: dict[str, Any], defs: dict[str, Any]) -> tuple[str, list[str]]:
    """A readable type and its constraints."""
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1], []
    if "anyOf" in node or "oneOf" in node:
        options = [_kind(option, defs) for option in node.get("anyOf") or node.get("oneOf") or []]
        return " or ".join(kind for kind, _ in options), [limit for _, group in options for limit in group]
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"]), []
    if "const" in node:
        return f"`{node['const']}`", []
    kind = node.get("type", "any")
    limits: list[str] = []
    if kind == "array":
        inner, limits = _kind(node.get("items", {}), defs)
        kind = f"list of {inner}"
    elif kind == "object" and isinstance(node.get("additionalProperties"), dict):
        inner, limits = _kind(node["additionalProperties"], defs)
        kind = f"map of {inner}"
    limits = limits + [text.format(node[key]).replace("|", "\\|") for key, text in LIMITS if key in node]
    return kind, limits


def _rows(properties: dict, defs: dict, prefix: str = "", defaults: dict | None = None):
    for name, node in properties.items():
        path = f"{prefix}{name}"
        ref = node.get("$ref")
        if ref:  # a section: its fields, with the section's default values
            yield from _rows(defs[ref.rsplit("/", 1)[-1]]["properties"], defs, f"{path}.", node.get("default"))
            continue
        kind, limits = _kind(node, defs)
        if "default" in node:
            default = json.dumps(node["default"])
        elif defaults and name in defaults:
            default = json.dumps(defaults[name])
        else:
            default = "required"
        if len(default) > 60:
            default = default[:57] + "..."
        about = " ".join(node.get("description", "").split()).replace("|", "\\|")
        yield f"| `{path}` | {about} | {kind} | `{default}` | {'; '.join(limits)} |"
        if item := _item_model(node):  # a list of sections (scaling.capacity): each element's fields
            yield from _rows(defs[item]["properties"], defs, f"{path}[].")
        if section := _optional_section(node):  # a section that may be left out (sweep): its fields
            yield from _rows(defs[section]["properties"], defs, f"{path}.")


def _optional_section(node: dict[str, Any]) -> str | None:
    """The model of a field that is a section or null."""
    refs = [option["$ref"] for option in node.get("anyOf", []) if "$ref" in option]
    return str(refs[0].rsplit("/", 1)[-1]) if len(refs) == 1 else None


def _item_model(node: dict[str, Any]) -> str | None:
    """The model a list field's elements are, if they are one."""
    for option in [node, *node.get("anyOf", [])]:
        ref = option.get("items", {}).get("$ref") if option.get("type") == "array" else None
        if ref:
            return str(ref.rsplit("/", 1)[-1])
    return None


def markdown(schema: dict) -> str:
    lines = [
        "# Run config reference",
        "",
        "Generated from `schemas/run-config.schema.json` (`raytune schema --markdown -o docs/config-reference.md`).",
        "Unknown keys are rejected everywhere; `null` means the field is unset.",
        "",
        "| field | what it is | type | default | constraints |",
        "|---|---|---|---|---|",
        *_rows(schema["properties"], schema["$defs"]),
    ]
    return "\n".join(lines) + "\n"
