"""What Terraform grants whom, as data: every *_iam_member of terraform/ for given variable values (tests/contract/tfeval.py
evaluates them), each turned into (identity, subject, resource, role) in the words of
functions/core/permissions.py, and the permissions of each role from Google's published lists
(tests/data/iam/roles.json) or from the custom role Terraform defines; and the helpers of the tests that run
the real clients through tests/fakes/gcs_iam.py with those grants."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from functions.core import permissions as p
from tests.contract.tfeval import Module, Unknown
from tests.fakes.gcs_iam import IamGcs

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
ROLES = Path(__file__).resolve().parents[1] / "data" / "iam" / "roles.json"
SERVICE_ACCOUNTS = {
    "functions": p.FUNCTIONS,
    "trigger": p.TRIGGER,
    "image_build": p.IMAGE_BUILD,
    "image_cache": p.IMAGE_CACHE_VM,
    "function_build": p.FUNCTION_BUILD,
}


@cache
def published_roles() -> dict[str, frozenset[str]]:
    return {name: frozenset(role["permissions"]) for name, role in json.loads(ROLES.read_text())["roles"].items()}


@dataclass(frozen=True)
class Grant:
    identity: str
    subject: str | None  # which one: the namespace of a trainer principal, the member of an operator
    resource: str  # functions/core/permissions.py's words: project, bucket:runs, topic:watch, ...
    name: str | None  # the bucket, service or topic granted on, where it is one of several
    role: str
    address: str  # the Terraform resource instance
    condition: str | None = None  # its IAM Condition's CEL expression

    def reaches(self, resource: str, name: str | None, permission: str) -> bool:
        """Whether the grant can hold for a use on this resource: conditions here name Cloud Storage resources
        (projects/_/buckets/B[/objects/O]), so a conditioned grant reaches no other kind. An object permission
        is checked on some object of the bucket (the condition must admit one), any other on the bucket."""
        if self.condition is None:
            return True
        if not resource.startswith("bucket:") or name is None:
            return False
        bucket = f"projects/_/buckets/{name}"
        if not permission.startswith("storage.objects."):
            return self.applies_to(bucket)
        objects = bucket + "/objects/"
        for term in self.condition.split(" || "):
            value = re.search(r'"([^"\\]+)"', term)
            assert value, term
            if value.group(1).startswith(objects) or (objects.startswith(value.group(1)) and "startsWith" in term):
                return True
        return False

    def applies_to(self, resource: str | None) -> bool:
        """Whether the condition holds for an IAM resource name. Only the forms Terraform here uses are known
        (terms `resource.name == "..."` and `resource.name.startsWith("...")` joined by ||): any other fails the
        test rather than being guessed at."""
        if self.condition is None:
            return True
        if resource is None:  # a resource whose name no condition here can match
            return False
        verdicts = []
        for term in self.condition.split(" || "):
            equal = re.fullmatch(r'resource\.name == "([^"\\]+)"', term)
            prefix = re.fullmatch(r'resource\.name\.startsWith\("([^"\\]+)"\)', term)
            assert equal or prefix, f"{self.address}: an IAM condition tests/contract/iam.py cannot evaluate: {term}"
            verdicts.append(resource == equal.group(1) if equal else resource.startswith(prefix.group(1)))
        return any(verdicts)


class Deployment:
    """terraform/ for one set of variable values."""

    def __init__(self, **variables: Any):
        self.variables = {"project_id": "proj", **variables}
        self.module = Module(TERRAFORM, self.variables)
        self.project = self.variables["project_id"]

    def bucket(self, name: str) -> str:
        return self.module._resource("google_storage_bucket", name).get("name")

    def roles(self) -> dict[str, frozenset[str]]:
        """Google's published roles and the custom ones this configuration defines."""
        custom = {
            str(role.get("name")): frozenset(role.get("permissions"))
            for role in self.module.instances("google_project_iam_custom_role")
        }
        return {**published_roles(), **custom}

    def member(self, value: Any) -> tuple[str, str | None]:
        text = str(value)
        sa = (
            re.fullmatch(r"google_service_account\.(\w+)(?:\[0\])?\.member", value.ref)
            if isinstance(value, Unknown)
            else None
        )
        if sa and sa.group(1) in SERVICE_ACCOUNTS:
            return SERVICE_ACCOUNTS[sa.group(1)], None
        if m := re.fullmatch(
            r"principal://iam\.googleapis\.com/projects/\$\{data\.google_project\.this\.number\}/locations/global/"
            rf"workloadIdentityPools/{re.escape(self.project)}\.svc\.id\.goog/subject/ns/([a-z0-9-]+)/sa/default",
            text,
        ):
            return p.TRAINER, m.group(1)
        if text == "serviceAccount:${data.google_project.this.number}-compute@developer.gserviceaccount.com":
            return p.NODES, None
        if text == "serviceAccount:${data.google_storage_project_service_account.gcs.email_address}":
            return p.STORAGE_AGENT, None
        if text == "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com":
            return p.PUBSUB_AGENT, None
        if text in self.variables.get("operators", []):
            return p.OPERATOR, text
        raise AssertionError(f"a grant to {text}, an identity functions/core/permissions.py does not know")

    def buckets(self, name: str) -> list[str]:
        kinds = {
            self.bucket("runs"): "bucket:runs",
            self.bucket("configs"): "bucket:configs",
            self.bucket("build"): "bucket:build",
        }
        found = [kinds[name]] if name in kinds else []
        found += ["bucket:policy"] * (name in self.variables.get("policy_buckets", []))
        found += ["bucket:datasets"] * (name in self.variables.get("dataset_buckets", []))
        assert found, f"a grant on gs://{name}, a bucket this deployment does not know"
        return found

    def resources(self, kind: str, instance: Any) -> list[tuple[str, str | None]]:
        """(resource, name) an IAM member instance grants on."""
        if kind == "google_project_iam_member":
            assert instance.get("project") == self.project
            return [("project", None)]
        if kind == "google_storage_bucket_iam_member":
            name = instance.get("bucket")
            return [(r, name) for r in self.buckets(name)]
        if kind == "google_pubsub_topic_iam_member":
            ref = instance.get("topic").ref
            return [("topic:" + re.fullmatch(r"google_pubsub_topic\.(\w+)\.id", ref).group(1).replace("_", "-"), None)]
        if kind == "google_pubsub_subscription_iam_member":
            assert instance.get("subscription").ref.startswith("google_pubsub_subscription.push[")
            return [("subscription:push", None)]
        if kind == "google_secret_manager_secret_iam_member":
            assert instance.get("secret_id").ref == "google_secret_manager_secret.hf_token.id"
            return [("secret:hf-token", None)]
        if kind == "google_artifact_registry_repository_iam_member":
            assert instance.get("repository").ref == "google_artifact_registry_repository.trainer.name"
            return [("repository:trainer", None)]
        if kind == "google_service_account_iam_member":
            target = instance.get("service_account_id")
            if isinstance(target, Unknown):
                sa = re.fullmatch(r"google_service_account\.(\w+)(?:\[0\])?\.name", target.ref).group(1)
                return [("service-account:" + sa.replace("_", "-"), None)]
            assert str(target).endswith("-compute@developer.gserviceaccount.com"), target
            return [("service-account:compute-default", None)]
        if kind == "google_cloud_run_service_iam_member":
            return [("service:functions", instance.get("service"))]
        raise AssertionError(f"{kind}: a kind of grant tests/contract/iam.py does not read")

    def region(self) -> str:
        return str(self.module.var("region"))

    def google_grants(self) -> list[Grant]:
        """What Google grants its service agents on the project when their APIs are enabled (permissions.py)."""
        return [
            Grant(a.identity, None, "project", None, a.role, f"google: {a.api} ({a.source})")
            for a in p.SERVICE_AGENTS
            if a.role
        ]

    def grants(self) -> list[Grant]:
        """Terraform's grants, then Google's own."""
        found = []
        for kind in sorted({k for k, _ in self.module.resources}):
            if not kind.endswith(("_iam_member", "_iam_binding", "_iam_policy")):
                continue
            assert kind.endswith("_iam_member"), f"{kind}: authoritative IAM would remove others' grants"
            for instance in self.module.instances(kind):
                identity, subject = self.member(instance.get("member"))
                role = str(instance.get("role"))
                conditions = [
                    str(self.module.eval(c.body["expression"], dict(instance.scope)))
                    for c in instance.blocks("condition")
                ]
                for resource, name in self.resources(kind, instance):
                    found.append(Grant(identity, subject, resource, name, role, instance.address, *conditions))
        return found + self.google_grants()

    def subjects(self, identity: str) -> list[str | None]:
        if identity == p.TRAINER:
            return list(self.variables.get("policy_namespaces", ["default"]))
        if identity == p.OPERATOR:
            return list(self.variables.get("operators", []))
        return [None]

    def names(self, resource: str) -> list[str | None]:
        """The concrete resources behind one of permissions.py's words (none: it does not exist here)."""
        for made in p.GOOGLE_RESOURCES:
            if made.resource == resource:
                values = {"number": "${data.google_project.this.number}", "project": self.project}
                return [made.name.format(region=self.region(), **values)]
        if resource == "bucket:policy":
            return list(self.variables.get("policy_buckets", []))
        if resource == "bucket:datasets":
            return list(self.variables.get("dataset_buckets", []))
        if resource.startswith("bucket:"):
            return [self.bucket(resource.removeprefix("bucket:"))]
        if resource == "service:functions":
            return [f.get("name") for f in self.module.instances("google_cloudfunctions2_function")]
        return [None]

    @staticmethod
    def covering(grants, roles, identity, subject, resource, name, permission) -> list[Grant]:
        """The grants that give this subject the permission on that resource (or on the whole project), where
        their IAM Conditions hold."""
        return [
            g
            for g in grants
            if g.identity == identity
            and g.subject == subject
            and (g.resource == "project" or (g.resource == resource and g.name in (None, name)))
            and permission in roles.get(g.role, frozenset())
            and g.reaches(resource, name, permission)
        ]

    def storage_permissions(self, identity: str, subject: str | None = None) -> Callable[[str, str], bool]:
        """What this identity may do on a storage resource (projects/_/buckets/B[/objects/NAME]): its grants on
        the bucket and on the project, through their roles, where their conditions hold."""
        roles, grants = self.roles(), [g for g in self.grants() if g.identity == identity and g.subject == subject]

        def allowed(resource: str, permission: str) -> bool:
            bucket = resource.removeprefix("projects/_/buckets/").split("/", 1)[0]
            return any(
                permission in roles[g.role] and g.applies_to(resource)
                for g in grants
                if g.resource == "project" or (g.resource.startswith("bucket:") and g.name == bucket)
            )

        return allowed


# -- on the wire (tests/fakes/gcs_iam.py) ---------------------------------------------------------------------


def client_at(url: str):
    """A google-cloud-storage client of nobody in particular at `url`: the emulator itself (whoever set the
    project up, no IAM in the way) or one identity's IAM-enforcing proxy."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="proj", credentials=AnonymousCredentials(), client_options={"api_endpoint": url})


@contextmanager
def serving(proxy: IamGcs) -> Iterator[str]:
    """The proxy's URL while it serves."""
    proxy.start()
    try:
        yield proxy.url
    finally:
        proxy.stop()


def uses_on_wire(d: Deployment, proxy: IamGcs) -> set[tuple[str, str]]:
    """(resource, permission) of every request let through, in permissions.py's words."""
    return {(resource, permission) for bucket, permission in proxy.used() for resource in d.buckets(bucket)}


def assert_listed(d: Deployment, proxy: IamGcs, identity: str) -> None:
    assert not proxy.refused(), "\n".join(
        f"{a.method} {a.path} needs {[str(n) for n in a.needs]} denied {a.denied}" for a in proxy.refused()
    )
    listed = {(u.resource, u.permission) for u in p.uses_of(identity, p.SWITCHES)}
    unlisted = uses_on_wire(d, proxy) - listed
    assert not unlisted, f"{identity} called what functions/core/permissions.py does not list: {sorted(unlisted)}"
