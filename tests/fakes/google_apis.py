"""Google's REST APIs `raytune doctor` asks (Resource Manager, Service Usage, Pub/Sub, Cloud Functions v2, Cloud
Scheduler, Secret Manager, Artifact Registry, GKE, IAM, Policy Troubleshooter), for one deployment: what
terraform/ makes for given variables (tests/contract/iam.py evaluates it) and what Google makes of it. IAM
questions are answered from Terraform's grants plus Google's own to its agents, through Google's published role
permissions and the grants' conditions, as the grants test reads them. Each service is served under /<service>/
(GoogleRest's endpoints). A test breaks one thing (`disabled`, `failed`, `dropped`, ...) and the doctor must say so."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote, urlsplit

from functions.core import permissions as p
from tests.contract.iam import SERVICE_ACCOUNTS, Deployment
from tests.contract.tfeval import Unknown
from tests.fakes.http import BackgroundServer, JsonHandler

NUMBER_REF = "${data.google_project.this.number}"
FOLDER = "1234"  # the folder a project sits in where a test puts it in one


@dataclass
class Breakage:
    """What is wrong with the deployment, one field a fault."""

    disabled: set[str] = field(default_factory=set)  # APIs not enabled
    failed: dict[str, str] = field(default_factory=dict)  # function -> its build's error
    missing: set[str] = field(default_factory=set)  # names of topics, subscriptions, jobs, secrets, functions gone
    dropped: set[str] = field(default_factory=set)  # Terraform grant addresses never applied
    no_secret_version: bool = False
    troubleshooter_forbidden: bool = False  # the caller may not ask about others' access
    gke_version: str | None = None
    ray_operator: bool = True
    tags: set[str] = field(default_factory=set)  # image tags that exist (package/tag)
    digests: dict[str, str] = field(default_factory=dict)  # a tag's current digest (package:tag -> sha256:...)
    disk_images: dict[str, dict] = field(default_factory=dict)  # Compute Engine disk images: name -> its answer
    folder: dict | None = None  # the project sits in folder 1234 with this allow policy (None: in no folder)
    folder_unreadable: bool = False  # the caller may not read the folder's policies (they are granted there)
    deny: list[dict] = field(default_factory=list)  # deny rules attached to the project (IAM v2 PolicyRule)
    external_ip: list[dict] = field(default_factory=list)  # the effective rules of compute.vmExternalIpAccess


class FakeGoogle(BackgroundServer):
    def __init__(
        self, deployment: Deployment, caller: str, number: str = "123456789012", broken: Breakage | None = None
    ):
        self.d, self.caller, self.number = deployment, caller, number
        self.broken = broken or Breakage()
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(JsonHandler):
            def _handle(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                fake.requests.append((self.command, url.path))
                status, answer = fake.answer(self.command, unquote(url.path), parse_qs(url.query), body)
                self.reply(status, answer)

            do_GET = do_POST = _handle

        super().__init__(Handler)

    def endpoints(self) -> dict[str, str]:
        services = ("cloudresourcemanager", "serviceusage", "pubsub", "cloudfunctions", "cloudscheduler")
        services += ("secretmanager", "artifactregistry", "container", "iam", "policytroubleshooter", "compute")
        services += ("orgpolicy",)
        return {s: f"{self.url}/{s}" for s in services}

    # -- what terraform/ makes ------------------------------------------------------------------------------

    def names(self, kind: str, attribute: str = "name") -> list[str]:
        return [str(i.get(attribute)) for i in self.d.module.instances(kind)]

    def exists(self, name: str) -> bool:
        return name not in self.broken.missing

    def text(self, value: object) -> str:
        return str(value).replace(NUMBER_REF, self.number)

    def identity_of(self, principal: str) -> tuple[str, str | None] | None:
        """(identity, subject) of a principal Troubleshooter was asked about."""
        for sa in self.d.module.instances("google_service_account"):
            if principal == f"{sa.get('account_id')}@{self.d.project}.iam.gserviceaccount.com":
                return SERVICE_ACCOUNTS[sa.name], None
        for agent in p.SERVICE_AGENTS:
            if principal == agent.email.format(number=self.number):
                return agent.identity, None
        if principal == f"{self.number}-compute@developer.gserviceaccount.com":
            return p.NODES, None
        if m := re.fullmatch(
            rf".*/workloadIdentityPools/{re.escape(self.d.project)}\.svc\.id\.goog/subject/ns/(.+)/sa/default",
            principal,
        ):
            return p.TRAINER, m.group(1)
        if principal == self.caller:
            return p.OPERATOR, self.caller
        return None

    def resource_of(self, full_name: str) -> tuple[str, str | None] | None:
        """(the permission table's word, name) of an IAM full resource name."""
        service, _, name = full_name.removeprefix("//").partition("/")
        if service == "cloudresourcemanager.googleapis.com":
            return ("project", None) if name == f"projects/{self.d.project}" else None
        if service == "storage.googleapis.com":
            bucket = name.removeprefix("projects/_/buckets/").split("/", 1)[0]
            [made] = self.d.names("bucket:gcf-sources")
            if bucket == self.text(made):
                return "bucket:gcf-sources", made
            try:
                return self.d.buckets(bucket)[0], bucket
            except AssertionError:
                return None
        if service == "pubsub.googleapis.com":
            topic = name.rsplit("/", 1)[1]
            for instance in self.d.module.instances("google_pubsub_topic"):
                if instance.get("name") == topic:
                    return "topic:" + instance.name.replace("_", "-"), None
        if service == "iam.googleapis.com":
            email = name.rsplit("/", 1)[1]
            if email == f"{self.number}-compute@developer.gserviceaccount.com":
                return "service-account:compute-default", None
            found = self.identity_of(email)
            if found:
                return "service-account:" + next(k for k, v in SERVICE_ACCOUNTS.items() if v == found[0]).replace(
                    "_", "-"
                ), None
        if service == "artifactregistry.googleapis.com":
            return (
                ("repository:gcf-artifacts", None) if name.endswith("/gcf-artifacts") else ("repository:trainer", None)
            )
        if service == "secretmanager.googleapis.com":
            return "secret:hf-token", None
        return None

    def may(self, principal: str, full_name: str, permission: str) -> bool | None:
        who, where = self.identity_of(principal), self.resource_of(full_name)
        if who is None or where is None:
            return None
        grants = [g for g in self.d.grants() if g.address not in self.broken.dropped]
        resource, name = where
        covering = self.d.covering(grants, self.d.roles(), *who, resource, name, permission)
        # A conditioned grant holds where its condition admits this very name (an object's, a bucket's).
        iam_name = full_name.removeprefix("//").partition("/")[2].replace(self.number, NUMBER_REF)
        return any(g.applies_to(iam_name) for g in covering)

    def member_of(self, identity: str, subject: str | None) -> str:
        """How an allow policy names an identity of the permission table (as terraform/ grants it)."""
        if identity == p.TRAINER:
            return (
                f"principal://iam.googleapis.com/projects/{self.number}/locations/global/workloadIdentityPools/"
                f"{self.d.project}.svc.id.goog/subject/ns/{subject}/sa/default"
            )
        if identity == p.OPERATOR:
            return str(subject)
        if identity == p.NODES:
            return f"serviceAccount:{self.number}-compute@developer.gserviceaccount.com"
        for sa in self.d.module.instances("google_service_account"):
            if SERVICE_ACCOUNTS.get(sa.name) == identity:
                return f"serviceAccount:{sa.get('account_id')}@{self.d.project}.iam.gserviceaccount.com"
        return "serviceAccount:" + p.agent(identity).email.format(number=self.number)

    def policy(self, resource: str, name: str | None = None) -> dict:
        """The allow policy (version 3) of a resource of the permission table, as getIamPolicy answers it: the
        grants made on it (a bucket's by its name), members grouped by role and condition."""
        grants = [
            g
            for g in self.d.grants()
            if g.address not in self.broken.dropped and g.resource == resource and g.name in (None, name)
        ]
        bindings: dict[tuple[str, str | None], list[str]] = {}
        for g in grants:
            bindings.setdefault((g.role, g.condition), []).append(self.member_of(g.identity, g.subject))
        return {
            "version": 3,
            "bindings": [
                {"role": self.text(role), "members": sorted(set(members))}
                | ({"condition": {"title": "raytune", "expression": condition}} if condition else {})
                for (role, condition), members in bindings.items()
            ],
        }

    def bucket_policy(self, bucket: str) -> dict:
        resource = self.d.buckets(bucket)[0]
        return self.policy(resource, bucket)

    # -- answering ------------------------------------------------------------------------------------------

    def answer(self, method: str, path: str, query: dict, body: dict) -> tuple[int, object]:
        service, _, rest = path.lstrip("/").partition("/")
        project, region, n = self.d.project, self.d.region(), self.d.module.var("name")
        if f"{service}.googleapis.com" in self.broken.disabled:
            return 403, {"error": {"code": 403, "message": f"{service} API has not been used in project {project}"}}
        if service == "cloudresourcemanager":
            if rest == f"v1/projects/{project}:getIamPolicy":
                return self.policy_read(f"//cloudresourcemanager.googleapis.com/projects/{project}", "project")
            if rest == f"v1/projects/{project}":
                return 200, {"projectId": project, "projectNumber": self.number}
            if rest == f"v1/projects/{project}:testIamPermissions":
                return 200, self.tested(f"//cloudresourcemanager.googleapis.com/projects/{project}", body)
            if rest == f"v1/projects/{project}:getAncestry":
                return self.ancestry()
            if rest == f"v2/folders/{FOLDER}:getIamPolicy" and self.broken.folder is not None:
                if self.broken.folder_unreadable:
                    return 403, {"error": {"code": 403, "message": "Permission 'resourcemanager.folders.getIamPolicy'"}}
                return 200, self.broken.folder
        if (
            service == "orgpolicy"
            and rest == f"v2/projects/{project}/policies/compute.vmExternalIpAccess:getEffectivePolicy"
        ):
            full = f"//cloudresourcemanager.googleapis.com/projects/{project}"
            if not self.may(self.caller, full, "orgpolicy.policy.get"):
                return 403, {"error": {"code": 403, "message": "Permission 'orgpolicy.policy.get' denied"}}
            name = f"projects/{self.number}/policies/compute.vmExternalIpAccess"
            return 200, {"name": name, "spec": {"rules": self.broken.external_ip}} if self.broken.external_ip else {
                "name": name
            }
        if service == "iam" and rest.startswith("v2/policies/"):
            return self.deny_policies(rest.removeprefix("v2/"))
        if service == "serviceusage" and rest == f"v1/projects/{project}/services":
            enabled = [s for s in self.names("google_project_service", "service") if s not in self.broken.disabled]
            return 200, {"services": [{"config": {"name": s}, "state": "ENABLED"} for s in enabled]}
        if service == "pubsub":
            if rest.endswith(":getIamPolicy"):
                topic = rest.removeprefix(f"v1/projects/{project}/topics/").removesuffix(":getIamPolicy")
                for instance in self.d.module.instances("google_pubsub_topic"):
                    if instance.get("name") == topic:
                        word = "topic:" + instance.name.replace("_", "-")
                        full = f"//pubsub.googleapis.com/projects/{project}/topics/{topic}"
                        return self.policy_read(full, word, None, "pubsub.topics.getIamPolicy")
            if rest.endswith(":testIamPermissions"):
                return 200, self.tested(
                    "//pubsub.googleapis.com/" + rest.removeprefix("v1/").removesuffix(":testIamPermissions"), body
                )
            kind, _, name = rest.removeprefix(f"v1/projects/{project}/").partition("/")
            made = self.names("google_pubsub_topic" if kind == "topics" else "google_pubsub_subscription")
            if name in made and self.exists(name):
                return 200, {"name": f"projects/{project}/{kind}/{name}"}
        if service == "iam" and rest.startswith(("v1/roles/", f"v1/projects/{project}/roles/")):
            role = rest.removeprefix("v1/")
            found = self.d.roles().get(role) or self.d.roles().get(role.replace(project, "${var.project_id}"))
            if found is None:
                return 404, {"error": {"code": 404, "message": f"role {role} not found"}}
            return 200, {"name": role, "includedPermissions": sorted(found)}
        if service == "iam" and rest.endswith(":testIamPermissions"):
            email = rest.removesuffix(":testIamPermissions").rsplit("/", 1)[1]
            return 200, self.tested(f"//iam.googleapis.com/projects/{project}/serviceAccounts/{email}", body)
        if service == "cloudfunctions":
            name = rest.rsplit("/", 1)[1]
            if rest.startswith(f"v2/projects/{project}/locations/{region}/functions/") and self.exists(name):
                for fn in self.d.module.instances("google_cloudfunctions2_function"):
                    if fn.get("name") == name:
                        return 200, self.function(fn)
        if service == "cloudscheduler":
            name = rest.rsplit("/", 1)[1]
            jobs = self.names("google_cloud_scheduler_job")
            if (
                rest.startswith(f"v1/projects/{project}/locations/{region}/jobs/")
                and self.exists(name)
                and name in jobs
            ):
                return 200, {"name": rest.removeprefix("v1/"), "state": "ENABLED"}
        if service == "secretmanager":
            secret = rest.removeprefix(f"v1/projects/{project}/secrets/").removesuffix("/versions")
            if secret in self.names("google_secret_manager_secret", "secret_id") and self.exists(secret):
                versions = (
                    [] if self.broken.no_secret_version else [{"name": f"{secret}/versions/1", "state": "ENABLED"}]
                )
                return 200, {"versions": versions}
        if service == "artifactregistry":
            repo = f"v1/projects/{project}/locations/{region}/repositories/{n}"
            if rest == repo and self.exists(n):
                return 200, {"name": rest.removeprefix("v1/")}
            tag = rest.removeprefix(repo + "/packages/").replace("/tags/", ":")
            if rest.startswith(repo + "/packages/") and tag in self.broken.tags:
                # Artifact Registry's Tag: its name and the version (the digest) it points to
                answer = {"name": rest.removeprefix("v1/")}
                if tag in self.broken.digests:
                    package = tag.partition(":")[0]
                    answer["version"] = (
                        f"{repo.removeprefix('v1/')}/packages/{package}/versions/{self.broken.digests[tag]}"
                    )
                return 200, answer
        if service == "compute":
            name = rest.removeprefix(f"compute/v1/projects/{project}/global/images/")
            if name in self.broken.disk_images:
                return 200, {"name": name, "kind": "compute#image", **self.broken.disk_images[name]}
        if service == "container":
            for cluster in self.d.module.instances("google_container_cluster"):
                if rest == f"v1/projects/{project}/locations/{cluster.get('location')}/clusters/{cluster.get('name')}":
                    return 200, {
                        "status": "RUNNING",
                        "currentMasterVersion": self.broken.gke_version or str(self.d.module.var("gke_min_version")),
                        "addonsConfig": {"rayOperatorConfig": {"enabled": self.broken.ray_operator}},
                    }
        if service == "policytroubleshooter" and rest == "v3/iam:troubleshoot":
            if self.broken.troubleshooter_forbidden:
                return 403, {"error": {"code": 403, "message": "Permission 'iam.roles.get' denied"}}
            access = body["accessTuple"]
            if not re.fullmatch(r"[^:/@\s]+@[^:/@\s]+", access["principal"]):
                # AccessTuple.principal: "the email address of a Google account, service account or group"; a
                # Workload Identity principal:// identifier is not one it evaluates
                message = f"Invalid principal: {access['principal']}. Principal must be an email address."
                return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
            verdict = self.may(access["principal"], access["fullResourceName"], access["permission"])
            state = {True: "CAN_ACCESS", False: "CANNOT_ACCESS", None: "UNKNOWN_INFO"}[verdict]
            return 200, {"overallAccessState": state}
        return 404, {"error": {"code": 404, "message": f"{path} not found"}}

    def ancestry(self) -> tuple[int, object]:
        """Resource Manager's getAncestry: the project, then its folder where it has one (no organization)."""
        full = f"//cloudresourcemanager.googleapis.com/projects/{self.d.project}"
        if not self.may(self.caller, full, "resourcemanager.projects.get"):
            return 403, {"error": {"code": 403, "message": "Permission 'resourcemanager.projects.get' denied"}}
        chain = [{"resourceId": {"type": "project", "id": self.d.project}}]
        if self.broken.folder is not None:
            chain.append({"resourceId": {"type": "folder", "id": FOLDER}})
        return 200, {"ancestor": chain}

    def deny_policies(self, name: str) -> tuple[int, object]:
        """IAM v2 policies of kind denypolicies (the path as decoded): listed by attachment point (names only, as
        listPolicies answers), and each read whole. A folder's are the folder's to read."""
        project_point = f"policies/cloudresourcemanager.googleapis.com/projects/{self.d.project}/denypolicies"
        if name.startswith("policies/cloudresourcemanager.googleapis.com/folders/"):
            if self.broken.folder_unreadable:
                return 403, {"error": {"code": 403, "message": "Permission 'iam.denypolicies.list' denied"}}
            return 200, {}
        if not name.startswith(project_point):
            return 404, {"error": {"code": 404, "message": f"{name} not found"}}
        full = f"//cloudresourcemanager.googleapis.com/projects/{self.d.project}"
        permission = "iam.denypolicies.list" if name == project_point else "iam.denypolicies.get"
        if not self.may(self.caller, full, permission):
            return 403, {"error": {"code": 403, "message": f"Permission '{permission}' denied"}}
        named = [f"{project_point}/deny-{i}" for i in range(len(self.broken.deny))]
        if name == project_point:  # names as IAM writes them: the attachment point URL-encoded
            point = quote(f"cloudresourcemanager.googleapis.com/projects/{self.d.project}", safe="")
            listed = [
                {"name": f"policies/{point}/denypolicies/deny-{i}", "kind": "DenyPolicy"} for i in range(len(named))
            ]
            return 200, {"policies": listed} if listed else {}
        if name in named:
            return 200, {"name": name, "kind": "DenyPolicy", "rules": [self.broken.deny[named.index(name)]]}
        return 404, {"error": {"code": 404, "message": f"{name} not found"}}

    def policy_read(
        self,
        full_name: str,
        resource: str,
        name: str | None = None,
        permission: str = "resourcemanager.projects.getIamPolicy",
    ) -> tuple[int, object]:
        """getIamPolicy, for a caller the grants let read it."""
        if not self.may(self.caller, full_name, permission):
            return 403, {"error": {"code": 403, "message": f"Permission '{permission}' denied on {full_name}"}}
        return 200, self.policy(resource, name)

    def tested(self, full_name: str, body: dict) -> dict:
        held = [perm for perm in body.get("permissions", []) if self.may(self.caller, full_name, perm)]
        return {"permissions": held}

    def function_env(self) -> dict[str, str]:
        """The functions' environment as Terraform sets it (local.function_env); what only exists once applied
        (topic ids, generated keys) as Google would show it."""
        found = {}
        for key, value in self.d.module.local("function_env").items():
            if isinstance(value, Unknown):
                topic = re.fullmatch(r"google_pubsub_topic\.(\w+)\.id", value.ref)
                value = f"projects/{self.d.project}/topics/raytune-{topic[1].replace('_', '-')}" if topic else "k" * 32
            found[key] = self.text(value)
        return found

    def function(self, fn) -> dict:
        name = str(fn.get("name"))
        [build] = fn.blocks("build_config")
        answer = {
            "name": name,
            "state": "ACTIVE",
            "buildConfig": {"entryPoint": str(fn.module.eval(build.body["entry_point"], dict(fn.scope)))},
            "serviceConfig": {"environmentVariables": self.function_env()},
        }
        if name in self.broken.failed:
            answer |= {
                "state": "FAILED",
                "stateMessages": [{"severity": "ERROR", "message": self.broken.failed[name]}],
            }
            answer["buildConfig"]["build"] = f"projects/{self.number}/locations/{self.d.region()}/builds/b-1"
        return answer
