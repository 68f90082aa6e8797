"""terraform/ beside Google's known-good configurations: for every resource type it uses, the provider's shipped
examples (magic-modules) and Google's maintained modules (terraform-google-modules) for the same use, read as
facts (tests/data/examples/known_good.json: each example's source and commit, and what it sets, orders and
grants). Each setting, ordering and grant an example has is either ours too or justified in a comment beside our
resource, `# vs <example>: <what>: <why>`; a justification for something we do have, or for an example not
listed, fails too (they go stale)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import hcl2
import pytest

from tests.contract.iam import Deployment

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
KNOWN_GOOD = json.loads((ROOT / "tests" / "data" / "examples" / "known_good.json").read_text())
JUSTIFIED = re.compile(r"#\s*vs ([\w#.-]+): ((?:setting|order after|grant) [^:]+): (.{10,})$")


def paths(body: dict, prefix: str = "") -> set[str]:
    """The attribute paths a resource body sets, nested blocks joined with dots (maps are values)."""
    found = set()
    for key, value in body.items():
        if key.startswith("__") or key == "depends_on":
            continue
        if key == "dynamic":  # dynamic "X" { content { ... } } sets the block X
            for generated in value:
                for name, spec in generated.items():
                    found.add(prefix + name.strip('"'))
                    for content in spec.get("content", []):
                        found |= paths(content, f"{prefix}{name.strip(chr(34))}.")
            continue
        found.add(prefix + key)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for block in value:
                found |= paths(block, f"{prefix}{key}.")
    return found


def ours() -> dict[str, dict[str, set[str]]]:
    """Per resource type: the settings any of our resources of it sets, and the resource types they refer to."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in sorted(TERRAFORM.glob("*.tf")):
        for block in hcl2.loads(path.read_text()).get("resource", []):
            for kind, named in block.items():
                for body in named.values():
                    mine = found.setdefault(kind.strip('"'), {"settings": set(), "refers": set()})
                    mine["settings"] |= paths(body)
                    mine["refers"] |= set(re.findall(r"\b([a-z][a-z0-9_]+)\.[a-z][a-z0-9_-]*\b", json.dumps(body)))
    return found


def justifications() -> dict[tuple[str, str], str]:
    found = {}
    for path in sorted(TERRAFORM.glob("*.tf")):
        for line in path.read_text().splitlines():
            if "# vs " in line:
                match = JUSTIFIED.search(line.strip())
                assert match, f"{path.name}: a justification not of the form `# vs <example>: <what>: <why>`: {line}"
                found[(match.group(1), match.group(2).strip())] = match.group(3)
    return found


def matched(kind: str, key: str, mine: dict[str, set[str]], grants: set[tuple[str, str]]) -> bool:
    what, _, rest = key.partition(" ")
    if what == "setting":
        return rest in mine["settings"]
    if key.startswith("order after "):
        return key.removeprefix("order after ") in mine["refers"]
    role, _, identity = rest.partition(" to ")
    return (identity, role) in grants


@pytest.fixture(scope="module")
def comparison() -> list[tuple[str, str, str, str]]:
    """(resource type, example, what, matched | the justification)."""
    mine, said = ours(), justifications()
    grants = {(g.identity, g.role) for g in Deployment().grants()}
    rows = []
    for kind, entry in KNOWN_GOOD["resources"].items():
        for feature in entry["features"]:
            example, key = feature["example"], feature["key"]
            if matched(kind, key, mine.get(kind, {"settings": set(), "refers": set()}), grants):
                rows.append((kind, example, key, "matched"))
            else:
                rows.append((kind, example, key, said.get((example, key), "")))
    return rows


def test_every_resource_type_is_held_against_an_example_or_says_why_none():
    used = set(ours())
    listed = KNOWN_GOOD["resources"]
    assert used == set(listed), f"not compared: {sorted(used - set(listed))}; gone: {sorted(set(listed) - used)}"
    for kind, entry in listed.items():
        assert entry["examples"] or entry.get("none_because"), kind
        assert {f["example"] for f in entry["features"]} <= set(entry["examples"]) <= set(KNOWN_GOOD["examples"])
    for name, example in KNOWN_GOOD["examples"].items():
        assert re.fullmatch(r"[\w-]+/[\w.-]+@[0-9a-f]{40}:\S+", example["source"]), name


def test_what_the_examples_have_and_we_lack_is_justified_beside_our_resource(comparison):
    print("\n".join(f"{kind:48} {example:36} {key:60} {verdict}" for kind, example, key, verdict in comparison))
    lacking = [f"{kind}: {example}: {key}" for kind, example, key, verdict in comparison if not verdict]
    assert not lacking, "neither ours nor justified (`# vs <example>: <what>: <why>` beside our resource):\n" + (
        "\n".join(lacking)
    )


def test_no_justification_is_stale(comparison):
    """A justification names an example feature we still lack: one for a feature now matched, or for one no
    example has, is left over."""
    lacking = {(example, key) for _, example, key, verdict in comparison if verdict != "matched"}
    stale = set(justifications()) - lacking
    assert not stale, f"justifications for what is matched or in no example: {sorted(stale)}"
