"""The allow-policy evaluation doctor uses where Policy Troubleshooter does not evaluate the principal."""

from __future__ import annotations

import pytest

from functions.core import iam_policy as iam

POOL = "projects/123/locations/global/workloadIdentityPools/p.svc.id.goog"
TRAINER = f"principal://iam.googleapis.com/{POOL}/subject/ns/default/sa/default"
OBJECT = "projects/_/buckets/b/objects/checkpoints/x"
WITHIN = (
    'resource.name == "projects/_/buckets/b/objects/checkpoints" || '
    'resource.name.startsWith("projects/_/buckets/b/objects/checkpoints/")'
)


def test_a_workload_identity_principal_is_named_by_itself_its_namespace_and_its_pool():
    assert iam.memberships(TRAINER) == {
        TRAINER,
        f"principalSet://iam.googleapis.com/{POOL}/namespace/default",
        f"principalSet://iam.googleapis.com/{POOL}/*",
    }
    assert iam.memberships("serviceAccount:a@p.iam.gserviceaccount.com") == {
        "serviceAccount:a@p.iam.gserviceaccount.com"
    }


def test_conditions_on_names_and_types_are_evaluated_and_others_are_not_guessed():
    assert iam.condition_holds(WITHIN, OBJECT, "storage.googleapis.com/Object") is True
    assert iam.condition_holds(WITHIN, "projects/_/buckets/b/objects/runs/r.json", "") is False
    typed = 'resource.type == "storage.googleapis.com/Object" && (resource.name.startsWith("projects/_/buckets/b/"))'
    assert iam.condition_holds(typed, OBJECT, "storage.googleapis.com/Object") is True
    assert iam.condition_holds(typed, OBJECT, "storage.googleapis.com/Bucket") is False
    assert iam.condition_holds('request.time < timestamp("2027-01-01T00:00:00Z")', OBJECT, "") is None


def test_the_verdict_reads_roles_conditions_and_shapes_it_does_not_know():
    policies = [
        {"bindings": [{"role": "roles/storage.objectUser", "members": [TRAINER], "condition": {"expression": WITHIN}}]},
        {"bindings": [None, {"role": 5}, {"role": "roles/x", "members": None}]},
        None,
        [],
    ]
    bindings, maybe = iam.roles_granting(policies, TRAINER)
    assert maybe == []
    roles = {"roles/storage.objectUser": frozenset({"storage.objects.create"})}
    assert iam.verdict(bindings, roles, "storage.objects.create", OBJECT, "")[0] == iam.GRANTED
    elsewhere = "projects/_/buckets/b/objects/runs/r.json"
    assert iam.verdict(bindings, roles, "storage.objects.create", elsewhere, "")[0] == iam.NOT_GRANTED
    assert iam.verdict(bindings, {"roles/storage.objectUser": None}, "storage.objects.create", OBJECT, "")[0] == (
        iam.UNKNOWN
    )


SET = f"principalSet://iam.googleapis.com/{POOL}"
CLUSTER = "https://container.googleapis.com/v1/projects/proj/locations/us-central1/clusters/raytune"


@pytest.mark.parametrize(
    ("member", "verdict"),
    [
        (f"{SET}/namespace/default", iam.GRANTED),  # every KSA of the namespace
        (f"{SET}/*", iam.GRANTED),  # the whole pool
        (f"{SET}/kubernetes.cluster/{CLUSTER}", iam.GRANTED),  # every workload of the deployment's cluster
        (f"{SET}/kubernetes.cluster/{CLUSTER.replace('raytune', 'other')}", iam.NOT_GRANTED),  # another cluster's
        (f"{SET}/kubernetes.serviceaccount.uid/4c1e-22", iam.UNKNOWN),  # a KSA by UID: not read here
        (f"{SET}/attribute.kubernetes.namespace/default", iam.UNKNOWN),  # an attribute set: not evaluated
        (f"{SET}/namespace/team-b", iam.NOT_GRANTED),  # another namespace
        (SET.replace("p.svc", "other.svc") + "/*", iam.NOT_GRANTED),  # another pool
    ],
)
def test_every_principal_form_of_workload_identity_for_gke(member, verdict):
    """Workload Identity Federation for GKE's principal identifiers, each as IAM holds the trainer in or out."""
    policies = [{"bindings": [{"role": "roles/storage.objectUser", "members": [member]}]}]
    bindings, maybe = iam.roles_granting(policies, TRAINER, clusters=(CLUSTER,))
    roles = {"roles/storage.objectUser": frozenset({"storage.objects.create"})}
    found, why = iam.verdict(bindings, roles, "storage.objects.create", OBJECT, "", maybe)
    assert found == verdict, why


@pytest.mark.parametrize(
    ("rule", "verdict"),
    [
        (
            {"deniedPrincipals": [TRAINER], "deniedPermissions": ["storage.googleapis.com/objects.create"]},
            "not granted",
        ),
        (
            {"deniedPrincipals": ["principalSet://goog/public:all"], "deniedPermissions": ["storage.googleapis.com/*"]},
            "not granted",
        ),
        ({"deniedPrincipals": [f"{SET}/*"], "deniedPermissions": ["storage.googleapis.com/objects.*"]}, "not granted"),
        ({"deniedPrincipals": [TRAINER], "deniedPermissions": ["storage.googleapis.com/buckets.*"]}, None),
        (
            {
                "deniedPrincipals": ["principalSet://goog/public:all"],
                "exceptionPrincipals": [f"{SET}/namespace/default"],
                "deniedPermissions": ["storage.googleapis.com/*"],
            },
            None,
        ),
        (
            {
                "deniedPrincipals": [TRAINER],
                "deniedPermissions": ["storage.googleapis.com/*"],
                "exceptionPermissions": ["storage.googleapis.com/objects.create"],
            },
            None,
        ),
        (
            {
                "deniedPrincipals": [f"{SET}/kubernetes.serviceaccount.uid/9"],
                "deniedPermissions": ["storage.googleapis.com/*"],
            },
            "unknown",
        ),
        (
            {
                "deniedPrincipals": [TRAINER],
                "deniedPermissions": ["storage.googleapis.com/*"],
                "denialCondition": {"expression": "resource.matchTag('p/env', 'prod')"},
            },
            "unknown",
        ),
    ],
)
def test_a_deny_rule_refuses_before_any_grant(rule, verdict):
    """IAM v2 deny rules: principals and their exceptions, permissions in v2 form with wildcards and exceptions,
    conditions evaluated where they are of the forms understood, else unknown."""
    found = iam.denied([{"name": "d", "rules": [{"denyRule": rule}]}], TRAINER, "storage.objects.create", OBJECT, "")
    assert (found[0] if found else None) == verdict, found
