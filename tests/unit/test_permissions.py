"""The permission table, pure: every identity has its uses, each use names a known resource, and the CLI
prints it (tests/contract/test_iam_grants.py holds Terraform to it)."""

from __future__ import annotations

import json
import re

import pytest

from functions.cli import main as cli
from functions.core import permissions as p

pytestmark = pytest.mark.unit
RESOURCE = re.compile(
    r"^(project|bucket:(runs|configs|datasets|policy|build)|topic:(launch|watch|run-events|dead-letter)"
    r"|subscription:push|secret:hf-token|repository:trainer|service:functions|service-account:[a-z-]+)$"
)


def test_every_identity_calls_something_and_every_use_is_well_formed():
    assert {u.identity for u in p.USES} == set(p.IDENTITIES)
    for use in p.USES:
        assert RESOURCE.match(use.resource), use
        assert re.fullmatch(r"[a-z]+\.[a-zA-Z]+\.[a-zA-Z]+", use.permission), use
        assert use.when in (None, p.CREATE_CLUSTERS) and use.why
    keys = [(u.identity, u.resource, u.permission) for u in p.USES]
    assert len(keys) == len(set(keys)), "a use listed twice"


def test_cluster_creation_adds_exactly_its_uses():
    plain = {u.permission for u in p.uses_of(p.FUNCTIONS)}
    creating = {u.permission for u in p.uses_of(p.FUNCTIONS, create_clusters=True)}
    assert creating - plain == {"container.clusters.create", "container.clusters.update", "iam.serviceAccounts.actAs"}


def test_the_cli_prints_the_table(capsys):
    assert cli(["permissions"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[:3] == ["who", "on", "permission"]
    assert "storage.buckets.get" in text and "trainer" in text
    assert cli(["permissions", "--json", "--create-clusters"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["identity"] for r in rows} == set(p.IDENTITIES)
    assert any(r["permission"] == "container.clusters.create" for r in rows)
