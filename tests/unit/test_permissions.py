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
    r"^(project|bucket:(runs|configs|datasets|policy|build|gcf-sources)|topic:(launch|watch|run-events|dead-letter)"
    r"|subscription:push|secret:hf-token|repository:(trainer|gcf-artifacts)|service:functions"
    r"|service-account:[a-z-]+)$"
)


def test_every_identity_calls_something_and_every_use_is_well_formed():
    assert {u.identity for u in p.USES} == set(p.IDENTITIES)
    for use in p.USES:
        assert RESOURCE.match(use.resource), use
        assert re.fullmatch(r"[a-z]+\.[a-zA-Z]+\.[a-zA-Z]+", use.permission), use
        assert use.when in (None, *p.SWITCHES) and use.why
    keys = [(u.identity, u.resource, u.permission) for u in p.USES]
    assert len(keys) == len(set(keys)), "a use listed twice"


def test_what_google_does_and_makes_says_where_google_says_so():
    """Every use by a service agent, and every use of something Google creates, names its source; every agent that
    acts is described (its address and the role Google gives it), and each of Google's resources has a maker."""
    agents = {a.identity for a in p.SERVICE_AGENTS}
    made = {r.resource for r in p.GOOGLE_RESOURCES}
    for use in p.USES:
        if use.identity in agents or use.resource in made:
            assert use.source, use
    assert {u.identity for u in p.USES if u.identity.endswith("-agent")} == agents
    for service_agent in p.SERVICE_AGENTS:
        assert re.fullmatch(r"service-\{number\}@[a-z-]+\.iam\.gserviceaccount\.com", service_agent.email)
        assert service_agent.api.endswith(".googleapis.com") and service_agent.source.startswith("https://")
    assert {r.created_by for r in p.GOOGLE_RESOURCES} <= agents
    assert made <= {u.resource for u in p.USES}


def test_the_function_build_reads_its_source_where_cloud_functions_put_it():
    """Not the build bucket (Cloud Functions' service agent reads that and copies it): gcf-v2-sources. Of the
    build bucket, only the apply's access probe (its own prefix, tests/contract/test_iam_grants.py)."""
    build = {(u.resource, u.permission) for u in p.uses_of(p.FUNCTION_BUILD)}
    assert ("bucket:gcf-sources", "storage.objects.get") in build
    assert not {r for r, _ in build} & {"bucket:runs", "bucket:configs"}
    [probe] = [u for u in p.uses_of(p.FUNCTION_BUILD) if u.resource == "bucket:build"]
    assert probe.permission == "storage.objects.get" and "function-build-probe/" in probe.why
    assert ("bucket:build", "storage.objects.get") in {(u.resource, u.permission) for u in p.uses_of(p.FUNCTIONS_AGENT)}


def test_cluster_creation_adds_exactly_its_uses():
    plain = {u.permission for u in p.uses_of(p.FUNCTIONS)}
    creating = {u.permission for u in p.uses_of(p.FUNCTIONS, [p.CREATE_CLUSTERS])}
    assert creating - plain == {"container.clusters.create", "container.clusters.update", "iam.serviceAccounts.actAs"}


def test_the_image_cache_adds_the_builder_and_its_vm_and_nothing_else():
    """`image_cache`: the image build makes and deletes the builder's VM, disk and disk image and acts as the VM's
    own account; the VM reads its startup script and pulls the trainer image; doctor reads the org policy on the
    VM's external IP for the operator. No other identity changes."""
    for identity in set(p.IDENTITIES) - {p.IMAGE_BUILD, p.IMAGE_CACHE_VM, p.OPERATOR}:
        assert p.uses_of(identity, [p.IMAGE_CACHE]) == p.uses_of(identity), identity
    operator = set(p.uses_of(p.OPERATOR, [p.IMAGE_CACHE])) - set(p.uses_of(p.OPERATOR))
    assert {(u.resource, u.permission) for u in operator} == {("project", "orgpolicy.policy.get")}
    assert p.uses_of(p.IMAGE_CACHE_VM) == []
    vm = {(u.resource, u.permission) for u in p.uses_of(p.IMAGE_CACHE_VM, [p.IMAGE_CACHE])}
    assert vm == {("bucket:build", "storage.objects.get"), ("repository:trainer", p.uses_of(p.NODES)[0].permission)}
    added = set(p.uses_of(p.IMAGE_BUILD, [p.IMAGE_CACHE])) - set(p.uses_of(p.IMAGE_BUILD))
    assert {u.resource for u in added} == {"project", "bucket:build", "service-account:image-cache"}
    assert all(u.permission.startswith("compute.") for u in added if u.resource == "project")
    creates = {u.permission for u in added if u.permission.endswith(".create")}
    assert creates == {
        "compute.disks.create",
        "compute.instances.create",
        "compute.images.create",
        "storage.objects.create",
    }
    with pytest.raises(ValueError, match="not a Terraform switch"):
        p.uses_of(p.IMAGE_BUILD, ["image-cache"])


def test_the_cli_prints_the_table(capsys):
    assert cli(["permissions"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[:3] == ["who", "on", "permission"]
    assert "storage.buckets.get" in text and "trainer" in text
    assert p.IMAGE_CACHE_VM not in text and "compute.images.create" not in text
    assert p.VERTEX_AGENT not in text and "aiplatform." not in text
    assert cli(["permissions", "--json", "--create-clusters", "--image-cache", "--tracking-vertex"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["identity"] for r in rows} == set(p.IDENTITIES)
    assert any(r["permission"] == "container.clusters.create" for r in rows)
    assert any(r["identity"] == p.IMAGE_BUILD and r["permission"] == "compute.images.create" for r in rows)
    assert any(r["identity"] == p.TRAINER and r["permission"] == "aiplatform.tensorboardRuns.write" for r in rows)
    assert any(r["identity"] == p.FUNCTIONS and r["permission"] == "aiplatform.models.upload" for r in rows)
