"""The allow-policy evaluation doctor uses where Policy Troubleshooter does not evaluate the principal."""

from __future__ import annotations

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
    bindings = iam.roles_granting(policies, TRAINER)
    roles = {"roles/storage.objectUser": frozenset({"storage.objects.create"})}
    assert iam.verdict(bindings, roles, "storage.objects.create", OBJECT, "")[0] == iam.GRANTED
    elsewhere = "projects/_/buckets/b/objects/runs/r.json"
    assert iam.verdict(bindings, roles, "storage.objects.create", elsewhere, "")[0] == iam.NOT_GRANTED
    assert iam.verdict(bindings, {"roles/storage.objectUser": None}, "storage.objects.create", OBJECT, "")[0] == (
        iam.UNKNOWN
    )
