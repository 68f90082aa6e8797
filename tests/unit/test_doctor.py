"""`raytune doctor`'s verdicts, pure (tests/contract/test_doctor.py runs it against the stand-ins)."""

from __future__ import annotations

import pytest

from functions.core import doctor as d
from functions.core import permissions as p

pytestmark = pytest.mark.unit


def test_gke_versions_compare_part_by_part():
    assert d.version_at_least("1.32.2-gke.1652000", "1.32.2-gke.1652000")
    assert d.version_at_least("1.33.0-gke.100", "1.32.2-gke.1652000")
    assert d.version_at_least("1.32.10-gke.1", "1.32.2-gke.1652000")
    assert not d.version_at_least("1.32.2-gke.1651999", "1.32.2-gke.1652000")
    assert d.version_at_least("latest", "1.32.2-gke.1652000") is None


def test_only_everything_ok_exits_zero():
    ok, bad, unknown = (d.Finding("api", "x", s) for s in (d.OK, d.PROBLEM, d.UNKNOWN))
    assert d.exit_code([ok, ok]) == 0
    assert d.exit_code([ok, unknown]) == 2
    assert d.exit_code([ok, unknown, bad]) == 1
    assert d.exit_code([]) == 2  # nothing was found out: not ok


@pytest.mark.parametrize(
    "state, status",
    [
        ("CAN_ACCESS", d.OK),
        ("CANNOT_ACCESS", d.PROBLEM),
        ("UNKNOWN_INFO", d.UNKNOWN),
        ("UNKNOWN_CONDITIONAL", d.UNKNOWN),
        (None, d.UNKNOWN),
    ],
)
def test_only_google_saying_can_access_is_ok(state, status):
    access = d.Access(p.FUNCTIONS, "serviceAccount:x@p.iam.gserviceaccount.com", "project", "//r", "a.b.c", "why")
    finding = d.access_finding(access, state, "refused")
    assert finding.status == status
    assert (finding.fix != "") == (status == d.PROBLEM)


def test_every_use_is_asked_or_counted_as_not_asked():
    names = d.Deployment("proj", "42", "us-central1", runs_bucket="r", configs_bucket="c", build_bucket="b")
    asked, skipped = d.accesses(names)
    assert len(asked) + len(skipped) == len(p.all_uses())
    assert {u.resource for u in skipped} <= {
        "bucket:policy",
        "bucket:datasets",
        "service:functions",
        "subscription:push",
        "secret:hf-token",
        "repository:trainer",
    }
    [sources] = {a.full_name for a in asked if a.resource == "bucket:gcf-sources"}
    assert sources == "//storage.googleapis.com/projects/_/buckets/gcf-v2-sources-42-us-central1"
    assert all(a.principal is None for a in asked if a.identity == p.OPERATOR)
    assert d.Deployment("proj", "42", "r").account(p.BUILD_AGENT) == (
        "serviceAccount:service-42@gcp-sa-cloudbuild.iam.gserviceaccount.com"
    )


def test_the_image_cache_builder_is_asked_about_under_its_scratch_space():
    """`raytune doctor --image-cache`: the builder VM is asked as Terraform's image-cache account, and object
    permissions held to image-cache/ are asked of an object there (a question about the bucket would be refused)."""
    names = d.Deployment("proj", "42", "us-central1", runs_bucket="r", configs_bucket="c", build_bucket="b")
    plain, _ = d.accesses(names)
    asked, _ = d.accesses(names, [p.IMAGE_CACHE])
    assert not any(a.identity == p.IMAGE_CACHE_VM for a in plain)
    vm = [a for a in asked if a.identity == p.IMAGE_CACHE_VM]
    assert {a.principal for a in vm} == {"serviceAccount:raytune-image-cache@proj.iam.gserviceaccount.com"}
    objects = "//storage.googleapis.com/projects/_/buckets/b/objects/image-cache/"
    for identity, permission in ((p.IMAGE_CACHE_VM, "storage.objects.get"), (p.IMAGE_BUILD, "storage.objects.create")):
        [access] = [a for a in asked if a.identity == identity and a.permission == permission]
        assert access.full_name.startswith(objects), access
    [act_as] = [a for a in asked if a.resource == "service-account:image-cache"]
    assert act_as.full_name.endswith("/serviceAccounts/raytune-image-cache@proj.iam.gserviceaccount.com")
