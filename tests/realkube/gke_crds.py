"""CustomResourceDefinitions for GKE's own kinds a launch applies, made from the vendored schemas: ComputeClass
(tests/data/computeclass/, transcribed from the CRD reference) and GCPResourceAllowlist
(tests/data/gcpresourceallowlist/, the CRD as GKE installs it), so the real API server validates what the
controller applies: the same fields, and unknown ones refused (the controller applies with
fieldValidation=Strict). GKE installs the real CRDs in its clusters; a bare API server has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema to a CRD's structural schema: every node typed, no const/not/titles; closed objects stay closed
    by pruning plus strict field validation, open ones preserve unknown fields."""
    out = {k: v for k, v in node.items() if k not in ("$schema", "title", "not", "const", "additionalProperties")}
    if "const" in node:
        out["enum"] = [node["const"]]
    if "enum" in out:
        out.setdefault("type", "string")
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(node["additionalProperties"])
    if "properties" in node:
        out["properties"] = {name: _structural(child) for name, child in node["properties"].items()}
    elif out.get("type") == "object" and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in node:
        out["items"] = _structural(node["items"])
    return out


def _crd(schema_file: Path, group: str, plural: str, kind: str) -> dict[str, Any]:
    schema = _structural(json.loads(schema_file.read_text()))
    schema["properties"]["metadata"] = {"type": "object"}  # the API server owns metadata's schema
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def compute_class() -> dict[str, Any]:
    return _crd(
        DATA / "computeclass" / "computeclass.schema.json", "cloud.google.com", "computeclasses", "ComputeClass"
    )


def resource_allowlist() -> dict[str, Any]:
    schema = DATA / "gcpresourceallowlist" / "gcpresourceallowlist.schema.json"
    return _crd(schema, "node.gke.io", "gcpresourceallowlists", "GCPResourceAllowlist")
