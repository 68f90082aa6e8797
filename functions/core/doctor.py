"""`raytune doctor`, pure: what a deployment Terraform made is called, what to ask Google about it, and the
verdicts. Each finding is ok, a problem (with the fix), or unknown: what the caller may not ask, or what Google
could not answer, is never reported as ok. functions/cli/doctor.py asks; this module decides."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from functions.core import permissions as p
from functions.core.result import GpuDriverSeen

OK, PROBLEM, UNKNOWN = "ok", "problem", "unknown"

# What terraform/apis.tf enables (tests/integration/test_terraform.py holds the two equal).
REQUIRED_APIS = (
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "compute.googleapis.com",
    "container.googleapis.com",
    "eventarc.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
)

# terraform/functions.tf: the three functions and their entry points.
FUNCTIONS = {"launch-upload": "launch", "launch-message": "launch", "watch": "watch"}


@dataclass(frozen=True)
class Finding:
    check: str  # what kind of thing: api, bucket, topic, function, iam, gke, kuberay, image, ...
    subject: str
    status: str  # OK, PROBLEM or UNKNOWN
    detail: str = ""
    fix: str = ""


@dataclass(frozen=True)
class Deployment:
    """The names Terraform gave one deployment (variables name, project_id, region; outputs in raytune.toml)."""

    project: str
    number: str  # the project number: service agents and Google's own resources are named by it
    region: str
    name: str = "raytune"
    runs_bucket: str = ""
    configs_bucket: str = ""
    build_bucket: str = ""
    launch_topic: str = ""
    watch_topic: str = ""
    repository: str = ""
    hf_token_secret: str = ""
    gke_cluster: str = ""
    image_location: str = ""  # the repository's location (a multi-region where every region pulls); "": region

    @property
    def repository_location(self) -> str:
        return self.image_location or self.region

    def topic(self, short: str) -> str:
        given = {"launch": self.launch_topic, "watch": self.watch_topic}.get(short)
        return given or f"projects/{self.project}/topics/{self.name}-{short}"

    def email(self, account: str) -> str:
        """A service account's address: one of Terraform's (functions, trigger, function-build, image-build,
        image-cache) or the Compute Engine default (compute-default), as the permission table's
        service-account:<name> calls them."""
        if account == "compute-default":
            return f"{self.number}-compute@developer.gserviceaccount.com"
        return f"{self.name}-{account}@{self.project}.iam.gserviceaccount.com"

    def account(self, identity: str) -> str | None:
        """The principal IAM knows an identity by; None for the person at the CLI (asked as the caller)."""
        accounts = {
            p.FUNCTIONS: "functions",
            p.TRIGGER: "trigger",
            p.FUNCTION_BUILD: "function-build",
            p.IMAGE_BUILD: "image-build",
            p.IMAGE_CACHE_VM: "image-cache",
            p.NODES: "compute-default",
        }
        if identity in accounts:
            return "serviceAccount:" + self.email(accounts[identity])
        if identity == p.TRAINER:  # the Ray pods' Kubernetes service account default, namespace default
            return (
                f"principal://iam.googleapis.com/projects/{self.number}/locations/global/workloadIdentityPools/"
                f"{self.project}.svc.id.goog/subject/ns/default/sa/default"
            )
        if identity == p.OPERATOR:
            return None
        return "serviceAccount:" + p.agent(identity).email.format(number=self.number)

    def full_name(self, resource: str) -> str | None:
        """A resource of the permission table as IAM names it (//service/...); None where the deployment's
        settings do not name it (policy and dataset buckets, the functions' services, the push subscriptions)."""
        buckets = {"runs": self.runs_bucket, "configs": self.configs_bucket, "build": self.build_bucket}
        kind, _, which = resource.partition(":")
        for made in p.GOOGLE_RESOURCES:
            if made.resource == resource:
                name = made.name.format(number=self.number, project=self.project, region=self.region)
                service = "storage" if kind == "bucket" else "artifactregistry"
                return f"//{service}.googleapis.com/" + (f"projects/_/buckets/{name}" if kind == "bucket" else name)
        if kind == "project":
            return f"//cloudresourcemanager.googleapis.com/projects/{self.project}"
        if kind == "bucket" and buckets.get(which):
            return f"//storage.googleapis.com/projects/_/buckets/{buckets[which]}"
        if kind == "topic":
            return f"//pubsub.googleapis.com/{self.topic(which)}"
        if resource == "secret:hf-token" and self.hf_token_secret:
            return f"//secretmanager.googleapis.com/projects/{self.project}/secrets/{self.hf_token_secret}"
        if resource == "repository:trainer" and self.repository:
            return (
                f"//artifactregistry.googleapis.com/projects/{self.project}/locations/{self.repository_location}/repositories/"
                f"{self.repository}"
            )
        if kind == "service-account":
            return f"//iam.googleapis.com/projects/{self.project}/serviceAccounts/{self.email(which)}"
        return None


@dataclass(frozen=True)
class Access:
    """One question for IAM: may this principal use this permission on this resource."""

    identity: str
    principal: str | None  # None: the caller (testIamPermissions)
    resource: str  # the permission table's word
    full_name: str
    permission: str
    why: str


# Object permissions granted under a prefix alone (terraform/iam.tf's IAM Conditions on the object's name) are
# asked of an object there, never of the bucket, where no condition holds: the trainer's in the runs bucket (as
# Ray Train writes checkpoints), the function build's in the build bucket (the apply's access probe), the image
# cache builder's there (Daisy's scratch space, terraform/image.tf). objects.list is checked on the bucket (its
# grants there are unconditioned).
OBJECT_ASKED = {
    (p.TRAINER, "bucket:runs"): "checkpoints/raytune-doctor-probe",
    (p.FUNCTION_BUILD, "bucket:build"): "function-build-probe/raytune-doctor-probe",
    (p.IMAGE_BUILD, "bucket:build"): "image-cache/raytune-doctor-probe",
    (p.IMAGE_CACHE_VM, "bucket:build"): "image-cache/raytune-doctor-probe",
}


def asked_on(use: p.Use, full_name: str) -> str:
    """The resource a use is asked about: an object inside the granted prefix for conditioned object uses."""
    object_use = use.permission.startswith("storage.objects.") and use.permission != "storage.objects.list"
    name = OBJECT_ASKED.get((use.identity, use.resource))
    return f"{full_name}/objects/{name}" if object_use and name else full_name


def accesses(deployment: Deployment, switches: Collection[str] = ()) -> tuple[list[Access], list[p.Use]]:
    """Every use of the permission table (with these of Terraform's switches on) this deployment's names let us
    ask about, and the ones they do not."""
    asked, skipped = [], []
    for use in p.all_uses(switches):
        full = deployment.full_name(use.resource)
        if full is None:
            skipped.append(use)
            continue
        full = asked_on(use, full)
        principal = deployment.account(use.identity)
        asked.append(Access(use.identity, principal, use.resource, full, use.permission, use.why))
    return asked, skipped


# A gen2 build refused its source, as Cloud Build words it (hashicorp/terraform-provider-google#20571).
SOURCE_REFUSED = re.compile(r"Access to bucket gcf-v2-sources-\S+ denied")


def source_read(deployment: Deployment) -> Access:
    """The function build identity's read of Cloud Functions' copy of its source, as the table lists it."""
    [access] = [
        a
        for a in accesses(deployment)[0]
        if a.identity == p.FUNCTION_BUILD
        and a.resource == "bucket:gcf-sources"
        and a.permission == "storage.objects.get"
    ]
    return access


def function_failed(subject: str, said: str, grant: Finding | None) -> Finding:
    """A function that is not ACTIVE. When its build was refused its source, the grant's state now tells why: a
    grant that exists was not yet effective when it built (IAM propagation takes minutes), or there is none."""
    rebuild = "terraform apply (it rebuilds the function, once its build identity is let in)"
    if grant is None:
        return Finding(
            "function", subject, PROBLEM, said, "read the build's log (gcloud builds log), fix it, " + rebuild
        )
    if grant.status == OK:
        why = "its build identity is granted that read now: the grant had not taken effect when it built"
        return Finding("function", subject, PROBLEM, f"{said}; {why}", rebuild)
    if grant.status == PROBLEM:
        why = f"its build identity has no grant to read it ({grant.subject})"
        return Finding("function", subject, PROBLEM, f"{said}; {why}", "terraform apply (terraform/iam.tf grants it)")
    why = f"whether its build identity may read it could not be asked ({grant.detail})"
    return Finding("function", subject, PROBLEM, f"{said}; {why}", rebuild)


# Policy Troubleshooter's overallAccessState (https://cloud.google.com/policy-intelligence/docs/reference/
# policytroubleshooter/rest/v3/iam/troubleshoot): only CAN_ACCESS is ok.
ACCESS_STATES = {"CAN_ACCESS": OK, "CANNOT_ACCESS": PROBLEM}


def access_finding(access: Access, state: str | None, said: str = "") -> Finding:
    who = access.principal or "you (the caller)"
    subject = f"{access.identity} {access.permission} on {access.full_name}"
    status = ACCESS_STATES.get(state or "", UNKNOWN)
    if status == OK:
        return Finding("iam", subject, OK)
    if status == PROBLEM and said.startswith("denied by"):  # IAM evaluates deny policies before any grant
        return Finding(
            "iam",
            subject,
            PROBLEM,
            f"{who} cannot: {access.why}: {said}",
            "the deny policy's owner excepts the principal (exceptionPrincipals) or the permission; no grant helps",
        )
    if status == PROBLEM:
        return Finding(
            "iam",
            subject,
            PROBLEM,
            f"{who} cannot: {access.why}",
            "terraform apply (terraform/iam.tf grants it); by hand: `raytune permissions` lists the role",
        )
    return Finding("iam", subject, UNKNOWN, f"could not ask: {said or state or 'no answer'}")


def gpu_node(node: dict[str, Any], reading: GpuDriverSeen | None, run_id: str | None) -> Finding:
    """A GPU node that exists: its accelerator, GKE version and driver label as GKE set them, and its NVIDIA driver
    against the image's CUDA as the run on it read them before its workers started (the node's driver is on no
    Kubernetes object; gpu-driver.json in the run folder has it)."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    labels = meta.get("labels") or {}
    name = str(meta.get("name", "?"))
    kubelet = ((status.get("nodeInfo") or {}).get("kubeletVersion") or "?").lstrip("v")
    said = (
        f"{labels.get('cloud.google.com/gke-accelerator', 'a GPU')} on GKE {kubelet}, driver "
        f"{labels.get('cloud.google.com/gke-gpu-driver-version', 'default')}"
    )
    if reading is None:
        why = f"run {run_id} has not read it yet" if run_id else "no run on it has read it"
        fix = f"kubectl debug node/{name} -it --image=busybox -- cat /proc/driver/nvidia/version"
        return Finding("gpu", name, UNKNOWN, f"{said}: its NVIDIA driver is not known ({why})", fix)
    read = f"{said} {reading.driver or '(none found)'}, the image's CUDA {reading.cuda or '?'} (read by {run_id})"
    if reading.problem:
        return Finding("gpu", name, PROBLEM, f"{read}: {reading.problem}", "see docs/trainer.md, the GPU driver")
    return Finding("gpu", name, OK, read)


_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?")


def version_at_least(version: str, minimum: str) -> bool | None:
    """GKE versions (1.32.2-gke.1652000) compared part by part; None when one cannot be read."""
    have, need = _VERSION.match(version or ""), _VERSION.match(minimum)
    if have is None or need is None:
        return None
    return tuple(int(x or 0) for x in have.groups()) >= tuple(int(x or 0) for x in need.groups())


def exit_code(findings: Iterable[Finding]) -> int:
    """0 only when everything is ok; 1 when something is wrong; 2 when nothing is wrong but not all was known."""
    statuses = {f.status for f in findings}
    if PROBLEM in statuses:
        return 1
    return 2 if UNKNOWN in statuses or not statuses else 0


def report(findings: list[Finding], skipped: int = 0) -> str:
    """One line a finding (problems and unknowns with what to do), then the counts."""
    lines = []
    for f in findings:
        line = f"{f.status:<8} {f.check:<12} {f.subject}"
        if f.detail:
            line += f": {f.detail}"
        if f.fix:
            line += f"\n{'':<22}fix: {f.fix}"
        lines.append(line)
    counts = {s: sum(f.status == s for f in findings) for s in (OK, PROBLEM, UNKNOWN)}
    summary = f"{counts[OK]} ok, {counts[PROBLEM]} problems, {counts[UNKNOWN]} unknown"
    if skipped:
        summary += f" ({skipped} uses of the permission table name resources raytune.toml does not: not asked)"
    return "\n".join([*lines, summary])


EXTERNAL_IP = "compute.vmExternalIpAccess"


def external_ip_verdict(answer: Any) -> Finding:
    """Whether the cache builder's VM may have the external IP it always gets (Daisy's default access config): the
    project's effective org policy for constraints/compute.vmExternalIpAccess, as Org Policy's getEffectivePolicy
    answers it. A rule of a shape or with a condition not read here is unknown."""
    subject = f"constraints/{EXTERNAL_IP} (raytune image --cache)"
    spec = answer.get("spec") if isinstance(answer, dict) else None
    rules = (spec or {}).get("rules") if isinstance(spec, dict) else None
    if not isinstance(answer, dict) or (spec is not None and not isinstance(spec, dict)):
        return Finding("orgpolicy", subject, UNKNOWN, "an answer that is not Org Policy's")
    if not rules:
        return Finding("orgpolicy", subject, OK)
    fix = (
        "an org policy administrator exempts the project (gcloud org-policies reset "
        f"{EXTERNAL_IP} --project=PROJECT), or the cache is built in a project that allows it"
    )
    for rule in rules if isinstance(rules, list) else [None]:
        if not isinstance(rule, dict) or rule.get("condition"):
            return Finding("orgpolicy", subject, UNKNOWN, "a rule with a condition, or of a shape not read here")
        if rule.get("denyAll"):
            why = "denies every VM an external IP; the cache builder's VM always gets one (Daisy's default)"
            return Finding("orgpolicy", subject, PROBLEM, why, fix)
        allowed = (rule.get("values") or {}).get("allowedValues") if isinstance(rule.get("values"), dict) else None
        if allowed:
            why = (
                f"allows external IPs only to {len(allowed)} listed instances; the cache builder's VM is named per "
                "build (its instance is never on the list)"
            )
            return Finding("orgpolicy", subject, PROBLEM, why, fix)
    return Finding("orgpolicy", subject, OK)
