"""`raytune doctor`: asks Google, with the caller's credentials and the deployment's names (raytune.toml), whether
what Terraform made is there and works, and what the controller renders fits the cluster; one line a check, ok /
problem (with the fix) / unknown, in seconds (the questions go out at once). The verdicts are
functions/core/doctor.py's; this module only asks."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from functions.adapters.gcs import split_uri
from functions.adapters.google_rest import GoogleRest
from functions.adapters.store import RECORDS
from functions.cli.config_commands import bucket_storage
from functions.cli.doctor_iam import IamQuestions
from functions.cli.settings import CliSettings
from functions.core import computeclass, errors, image_cache, manifests, permissions
from functions.core import doctor as d
from functions.core.config import ClusterSpec, RunConfig
from functions.core.doctor import OK, PROBLEM, UNKNOWN, Finding
from functions.core.result import GPU_DRIVER_FILE, GpuDriverSeen, run_folder
from functions.handlers.settings import policy_from_env

WORKERS = 16  # questions in flight at once
# What a server-side apply of a custom resource (KubeRay's, GKE's ComputeClass) is authorized as on GKE.
DRY_RUN_PERMISSIONS = "container.thirdPartyObjects.create and container.thirdPartyObjects.update"
NOT_AN_OBJECT = "Google answered with something other than the JSON object its API documents"
# A 200 whose fields are all null names nothing that exists: neither ok nor missing.
ALL_NULL = "Google's answer names nothing (every field null): not known to exist"


def _all_null(answer: dict) -> bool:
    return bool(answer) and all(value is None for value in answer.values())


SERVICES = {"bucket": "storage", "topic": "pubsub", "subscription": "pubsub", "scheduler": "cloudscheduler"}


def _asked(check: str, subject: str, ask: Callable[[], Finding], missing: str, fix: str) -> Finding:
    """One question: its finding; NotFound is the problem `missing`; refused or unanswered is unknown."""
    try:
        return ask()
    except errors.NotFound:
        return Finding(check, subject, PROBLEM, missing, fix)
    except errors.ControllerError as exc:
        return Finding(check, subject, UNKNOWN, f"could not ask: {errors.describe(exc, 300)}")


T = TypeVar("T")


def _read(ask: Callable[[], T], what: tuple[str, str]) -> T | list[Finding]:
    """A question's findings, whatever Google answered: an answer of a shape no API documents (null, [], an HTML
    page, fields of another type) is unknown, never a crash and never ok."""
    try:
        return ask()
    except Exception as exc:
        check, subject = what
        said = errors.describe(exc, 200) if isinstance(exc, errors.ControllerError) else type(exc).__name__
        return [Finding(check, subject, UNKNOWN, f"could not read Google's answer: {said}")]


@dataclass
class Doctor:
    settings: CliSettings
    rest: GoogleRest
    kube_for: Callable[[ClusterSpec], Any]  # the cluster's Kube adapter (functions/adapters/kube.py)
    config: RunConfig | None = None  # a run config to render, with its images; else the defaults
    switches: Sequence[str] = ()  # Terraform's switches that add grants (permissions.SWITCHES) the deployment has on
    functions_env: dict[str, str] = field(default_factory=dict)  # the deployed launch function's environment
    caller: Finding | None = None  # who asks, and the quota project their requests name

    def __post_init__(self) -> None:
        project = self.settings.project or ""
        clusters = tuple(
            f"https://container.googleapis.com/v1/projects/{project}/locations/{region}/clusters/"
            f"{self.spec(region).gke_cluster}"
            for region in self.regions()
        )
        self.iam = IamQuestions(self.rest, project, clusters)

    # -- the deployment ------------------------------------------------------------------------------------

    def deployment(self) -> tuple[d.Deployment, list[Finding]]:
        s = self.settings
        s.need("project", "region", "runs_bucket")
        project, number, found = s.project or "", "", []
        try:
            answer = self.rest.get("cloudresourcemanager", f"v1/projects/{project}")
            said = answer.get("projectNumber") if isinstance(answer, dict) else None
            if isinstance(said, int | str) and str(said).isdigit():
                number = str(said)
                found.append(Finding("project", project, OK, f"number {number}"))
            else:
                found.append(Finding("project", project, UNKNOWN, "Google's answer names no project number"))
        except errors.ControllerError as exc:
            found.append(Finding("project", project, UNKNOWN, f"could not read it: {errors.describe(exc, 300)}"))
        named = ("runs_bucket", "configs_bucket", "build_bucket", "launch_topic", "watch_topic", "repository")
        names = {k: getattr(s, k) or "" for k in (*named, "hf_token_secret", "gke_cluster")}
        # raytune.toml's image_repository, LOCATION-docker.pkg.dev/...: where the repository is (a multi-region)
        location = (s.image_repository or "").split("-docker.pkg.dev", 1)[0] if s.image_repository else ""
        return d.Deployment(
            project, number, s.region or "", s.name or "raytune", **names, image_location=location
        ), found

    def run(self) -> tuple[list[Finding], int]:
        deployment, found = self.deployment()
        if self.caller is not None:
            found.insert(0, self.caller)
        accesses, skipped = d.accesses(deployment, self.switches)
        # first: the cluster's checks read the policy from their environment
        found += _read(lambda: self.functions(deployment), ("function", "the functions"))
        questions: list[tuple[Callable[[], list[Finding]], tuple[str, str]]] = [
            (lambda: self.apis(deployment), ("api", "services")),
            *(
                (
                    lambda region=region: self.cluster(deployment, region),
                    ("gke", f"{region}/{self.spec(region).gke_cluster}"),
                )
                for region in self.regions()
            ),
            (lambda: self.image(deployment), ("image", "the trainer image")),
            *((lambda what=what: self.exists(deployment, what), what[:2]) for what in self.resources(deployment)),
            *((lambda a=a: [self.iam.access(a)], ("iam", a.full_name)) for a in accesses if a.principal is not None),
            *(
                (lambda r=r, group=group: self.iam.callers(r, group), ("iam", r))
                for r, group in IamQuestions.caller_groups(accesses).items()
            ),
        ]
        if permissions.IMAGE_CACHE in self.switches:
            questions.append((lambda: [self.external_ip()], ("orgpolicy", d.EXTERNAL_IP)))
        if self.config is not None:
            questions.append((lambda: [self.accepted()], ("launch", self.config.name)))
        if not deployment.number:
            questions = questions[:3]  # without the project number no identity or Google resource can be named
        with ThreadPoolExecutor(WORKERS) as pool:
            for answer in pool.map(lambda question: _read(*question), questions):
                found += answer
        return found, len(skipped)

    def external_ip(self) -> Finding:
        """The project's effective org policy on VMs' external IPs, before a cache build finds it."""
        project = self.settings.project or ""
        path = f"v2/projects/{project}/policies/{d.EXTERNAL_IP}:getEffectivePolicy"
        try:
            return d.external_ip_verdict(self.rest.get("orgpolicy", path))
        except errors.ControllerError as exc:
            return Finding(
                "orgpolicy", f"constraints/{d.EXTERNAL_IP}", UNKNOWN, f"could not ask: {errors.describe(exc, 200)}"
            )

    # -- what Terraform made -------------------------------------------------------------------------------

    def apis(self, deployment: d.Deployment) -> list[Finding]:
        enabled: set[str] = set()
        params: dict[str, Any] = {"filter": "state:ENABLED", "pageSize": 200}
        try:
            while True:
                page = self.rest.get("serviceusage", f"v1/projects/{deployment.project}/services", params)
                enabled |= {s["config"]["name"] for s in page.get("services", [])}
                if not page.get("nextPageToken"):
                    break
                params["pageToken"] = page["nextPageToken"]
        except errors.ControllerError as exc:
            return [Finding("api", "services", UNKNOWN, f"could not list: {errors.describe(exc, 300)}")]
        return [
            Finding("api", api, OK)
            if api in enabled
            else Finding("api", api, PROBLEM, "not enabled", f"gcloud services enable {api} (terraform apply does)")
            for api in d.REQUIRED_APIS
        ]

    def resources(self, deployment: d.Deployment) -> list[tuple[str, str, str]]:
        """(check, subject, path): the buckets, topics, subscriptions, scheduler job and secret Terraform made."""
        p, r, n = deployment.project, deployment.region, deployment.name
        # A bucket is asked with testIamPermissions: anyone may ask, and a bucket that does not exist is a 404.
        found = [("bucket", b, f"storage/v1/b/{b}/iam/testPermissions") for b in self.buckets(deployment)]
        found += [("topic", t, f"v1/{deployment.topic(t)}") for t in ("launch", "watch", "run-events", "dead-letter")]
        subscriptions = (f"{n}-launch-push", f"{n}-watch-push", f"{n}-dead-letter")
        found += [("subscription", s, f"v1/projects/{p}/subscriptions/{s}") for s in subscriptions]
        found += [("scheduler", f"{n}-watch-tick", f"v1/projects/{p}/locations/{r}/jobs/{n}-watch-tick")]
        secret = deployment.hf_token_secret or f"{n}-hf-token"
        found += [("secret", secret, f"v1/projects/{p}/secrets/{secret}/versions")]
        return found

    @staticmethod
    def buckets(deployment: d.Deployment) -> list[str]:
        return [b for b in (deployment.runs_bucket, deployment.configs_bucket, deployment.build_bucket) if b]

    def exists(self, deployment: d.Deployment, what: tuple[str, str, str]) -> list[Finding]:
        check, subject, path = what

        def ask() -> Finding:
            if check == "secret":  # its versions' metadata only: the value is never read
                versions = self.rest.get("secretmanager", path, {"filter": "state:ENABLED"}).get("versions", [])
                if not versions:
                    return Finding(
                        check,
                        subject,
                        PROBLEM,
                        "no enabled version: runs of gated models cannot download them",
                        f'printf %s "$HF_TOKEN" | gcloud secrets versions add {subject} --data-file=-',
                    )
                return Finding(check, subject, OK)
            answer = self.rest.get(
                SERVICES[check], path, {"permissions": "storage.objects.list"} if check == "bucket" else None
            )
            if not isinstance(answer, dict):
                return Finding(check, subject, UNKNOWN, NOT_AN_OBJECT)
            if _all_null(answer):
                return Finding(check, subject, UNKNOWN, ALL_NULL)
            if check == "scheduler" and answer.get("state") not in (None, "ENABLED"):
                fix = f"gcloud scheduler jobs resume {subject} --location {deployment.region}"
                return Finding(check, subject, PROBLEM, f"state {answer.get('state')}", fix)
            return Finding(check, subject, OK)

        return [_asked(check, subject, ask, "missing", "terraform apply (it makes it)")]

    def functions(self, deployment: d.Deployment) -> list[Finding]:
        base = f"v2/projects/{deployment.project}/locations/{deployment.region}/functions"
        return [
            self.function(f"{base}/{deployment.name}-{key}", entry, deployment) for key, entry in d.FUNCTIONS.items()
        ]

    def function(self, path: str, entry: str, deployment: d.Deployment) -> Finding:
        subject = path.rsplit("/", 1)[1]

        def ask() -> Finding:
            fn = self.rest.get("cloudfunctions", path)
            if not isinstance(fn, dict) or not isinstance(fn.get("state"), str):
                return Finding("function", subject, UNKNOWN, NOT_AN_OBJECT + " with a state")
            self.functions_env.update((fn.get("serviceConfig") or {}).get("environmentVariables") or {})
            build = fn.get("buildConfig") or {}
            if fn.get("state") != "ACTIVE":
                said = "; ".join(m.get("message", "") for m in fn.get("stateMessages", []) if m.get("message"))
                where = f" (build {build['build']})" if build.get("build") else ""
                grant = self.iam.access(d.source_read(deployment)) if d.SOURCE_REFUSED.search(said) else None
                return d.function_failed(subject, f"state {fn.get('state')}{where}: {said or 'no message'}", grant)
            if build.get("entryPoint") not in (None, entry):
                return Finding("function", subject, PROBLEM, f"entry point {build.get('entryPoint')}, not {entry}")
            return Finding("function", subject, OK, "ACTIVE")

        return _asked("function", subject, ask, "missing", "terraform apply (it builds and deploys it)")

    # -- the cluster ---------------------------------------------------------------------------------------

    def regions(self) -> list[str]:
        """Every region of the deployment with a cluster (raytune.toml's regions, else its region), and the regions
        of the config asked about."""
        try:
            listed = json.loads(self.settings.regions or "[]")
        except ValueError:
            listed = []  # a hand-edited raytune.toml: the region alone is asked about
        listed = [r for r in listed if isinstance(r, str)] if isinstance(listed, list) else []
        first = self.settings.region or (self.config or RunConfig()).cluster.region
        return list(dict.fromkeys([first, *listed, *(self.config.cluster.regions if self.config else ())]))

    def spec(self, region: str) -> ClusterSpec:
        cfg = self.config or RunConfig()
        spec = cfg.cluster
        if self.settings.gke_cluster:
            spec = spec.model_copy(update={"gke_cluster": self.settings.gke_cluster})
        return spec.model_copy(update={"region": region, "fallback_regions": []})

    def cluster(self, deployment: d.Deployment, region: str) -> list[Finding]:
        spec = self.spec(region)
        subject = f"{spec.region}/{spec.gke_cluster}"
        path = f"v1/projects/{deployment.project}/locations/{spec.region}/clusters/{spec.gke_cluster}"
        try:
            cluster = self.rest.get("container", path)
        except errors.NotFound:
            return [Finding("gke", subject, PROBLEM, "no such cluster", "terraform apply (create_gke_cluster=true)")]
        except errors.ControllerError as exc:
            return [Finding("gke", subject, UNKNOWN, f"could not read it: {errors.describe(exc, 300)}")]
        if not isinstance(cluster, dict) or not isinstance(cluster.get("status"), str):
            return [Finding("gke", subject, UNKNOWN, NOT_AN_OBJECT + " with a status")]
        found = []
        version = cluster.get("currentMasterVersion") or ""
        newer = d.version_at_least(version, computeclass.MIN_GKE_VERSION)
        status = OK if newer else UNKNOWN if newer is None else PROBLEM
        fix = "" if newer else f"gcloud container clusters upgrade {spec.gke_cluster} --master --cluster-version ..."
        found.append(
            Finding("gke", f"{subject} version", status, f"{version} (needs {computeclass.MIN_GKE_VERSION})", fix)
        )
        ray = ((cluster.get("addonsConfig") or {}).get("rayOperatorConfig") or {}).get("enabled") is True
        found.append(
            Finding("gke", f"{subject} Ray operator add-on", OK)
            if ray
            else Finding(
                "gke",
                f"{subject} Ray operator add-on",
                PROBLEM,
                "not enabled: no KubeRay",
                f"gcloud container clusters update {spec.gke_cluster} --update-addons=RayOperator=ENABLED",
            )
        )
        if cluster.get("status") != "RUNNING":
            found.append(Finding("gke", subject, UNKNOWN, f"status {cluster.get('status')}: its API was not asked"))
            return found
        return found + self.rendered(spec)

    def rendered(self, spec: ClusterSpec) -> list[Finding]:
        """A server-side dry run of what a launch applies, in its order: the cluster's CRDs declare every field we
        render, and the caller may write each kind."""
        try:
            kube = self.kube_for(spec)
        except errors.ControllerError as exc:
            return [Finding("kuberay", "the cluster's API", UNKNOWN, f"could not connect: {errors.describe(exc, 300)}")]
        objects = manifests.assemble(self.launched(spec), "doctor-dry-run", {"trainer/__init__.py": b""}, "0" * 64)
        found = [self.dry_run(kube, obj) for obj in objects.in_order()]
        return found + _read(lambda: self.gpu_nodes(kube, spec), ("gpu", "the GPU nodes"))

    def gpu_nodes(self, kube: Any, spec: ClusterSpec) -> list[Finding]:
        """Each GPU node that exists (GKE makes them for runs), with its driver as the run on it read it."""
        try:
            gpus = [n for n in kube.nodes() if int((n["status"].get("capacity") or {}).get("nvidia.com/gpu", 0))]
            pods = kube.pods(spec.namespace, manifests.RUN_LABEL)
        except errors.ControllerError as exc:
            return [Finding("gpu", "the GPU nodes", UNKNOWN, f"could not list them: {errors.describe(exc, 300)}")]
        if not gpus:
            return [Finding("gpu", "the GPU nodes", OK, "none now: GKE makes them for runs and removes them after")]
        runs = {p["spec"].get("nodeName"): p["metadata"]["labels"][manifests.RUN_LABEL] for p in pods}
        found = []
        for node in gpus:
            run_id = runs.get(node["metadata"]["name"])
            found.append(d.gpu_node(node, self.driver_reading(run_id) if run_id else None, run_id))
        return found

    def driver_reading(self, run_id: str) -> GpuDriverSeen | None:
        """What the run's preflight kept in its run folder (its record names the folder's storage)."""
        bucket, default = self.settings.runs_bucket or "", bucket_storage(self.settings.runs_bucket)
        assert default is not None  # deployment() required the runs bucket
        try:
            record = self.stored(bucket, f"{RECORDS}{run_id}.json")
            storage = str(((record or {}).get("config") or {}).get("storage_path") or default)
            return GpuDriverSeen.model_validate(
                self.stored(*split_uri(f"{run_folder(storage, run_id)}/{GPU_DRIVER_FILE}"))
            )
        except (errors.ControllerError, ValueError, AttributeError):
            return None

    def stored(self, bucket: str, name: str) -> Any:
        """A JSON object's content, read through the JSON API (as the caller, like every question here)."""
        return self.rest.get("storage", f"storage/v1/b/{bucket}/o/{quote(name, safe='')}", {"alt": "media"})

    def accepted(self) -> Finding:
        """Whether the launch would accept the config, judged by the launch's own judge (core/acceptance.py) under
        the deployment as the launch function has it (its RAYTUNE_* environment): the policy, the buckets, the
        prices and budget. Where that environment could not be read, the judge has only raytune.toml's names."""
        from functions.core import acceptance
        from functions.core.events import LaunchRequest
        from functions.handlers.settings import Settings

        assert self.config is not None
        names = {"RAYTUNE_PROJECT": self.settings.project or "", "RAYTUNE_BUCKET": self.settings.runs_bucket or ""}
        rules = Settings.from_env({**names, **self.functions_env})
        document = self.config.model_dump(mode="json", exclude_none=True)
        request = LaunchRequest(self.config.name, {"kind": "upload", "ref": "raytune doctor"}, None, config=document)
        verdict = acceptance.judge(request, acceptance.Document(document), rules, dt.datetime.now(dt.UTC))
        if verdict.accepted:
            return Finding("launch", self.config.name, OK)
        fix = "edit the config (the launch would record it REJECTED with these reasons)"
        return Finding("launch", self.config.name, PROBLEM, "; ".join(verdict.errors)[:600], fix)

    def launched(self, spec: ClusterSpec) -> RunConfig:
        """The config as the launch function renders it: the operator's policy as deployed (the function's own
        RAYTUNE_POLICY_* variables, read the way it reads them) fills in what it fixes, exactly as at a launch."""
        cfg = (self.config or RunConfig()).model_copy(update={"cluster": spec})
        return policy_from_env({"RAYTUNE_PROJECT": self.settings.project or "", **self.functions_env}).fixed(cfg)

    @staticmethod
    def dry_run(kube: Any, obj: dict) -> Finding:
        # GKE's CRD, KubeRay's, or Kubernetes' own kinds
        check = {"ComputeClass": "gke", "RayCluster": "kuberay", "RayJob": "kuberay"}.get(obj["kind"], "kube")
        subject = f"{obj['kind']} {obj['apiVersion']}"
        try:
            kube.apply(obj, dry_run=True)
        except errors.PermanentError as exc:
            if exc.status in (401, 403):
                # A dry run is authorized as the write it stands for: the operators' container.viewer may not.
                return Finding(
                    check,
                    subject,
                    UNKNOWN,
                    f"may not dry-run its apply ({exc.status}): it needs {DRY_RUN_PERMISSIONS} (roles/container.developer "
                    "has them; container.viewer does not)",
                )
            return Finding(check, subject, PROBLEM, str(exc)[:400])
        except errors.ControllerError as exc:
            return Finding(check, subject, UNKNOWN, f"could not ask: {errors.describe(exc, 300)}")
        return Finding(check, subject, OK, "every field rendered is declared")

    # -- the trainer image ---------------------------------------------------------------------------------

    def image(self, deployment: d.Deployment) -> list[Finding]:
        """The trainer repository, and the images a given config runs (where they are in Artifact Registry)."""
        found = []
        if deployment.repository:
            subject = f"repository {deployment.repository}"
            where = deployment.repository_location
            path = f"v1/projects/{deployment.project}/locations/{where}/repositories/{deployment.repository}"
            found.append(self.present("image", subject, "artifactregistry", path, "terraform apply (image.tf)"))
        cluster = (self.config or RunConfig()).cluster
        found += [self.tagged(ref) for ref in sorted({i for i in (cluster.worker_image, cluster.head_image) if i})]
        if cluster.image_cache:
            found.append(self.cached(cluster.image_cache, cluster.worker_image_ref))
        return found

    def present(self, check: str, subject: str, service: str, path: str, fix: str, missing: str = "missing") -> Finding:
        def ask() -> Finding:
            answer = self.rest.get(service, path)
            if not isinstance(answer, dict):
                return Finding(check, subject, UNKNOWN, NOT_AN_OBJECT)
            if _all_null(answer):
                return Finding(check, subject, UNKNOWN, ALL_NULL)
            return Finding(check, subject, OK)

        return _asked(check, subject, ask, missing, fix)

    def tagged(self, ref: str) -> Finding:
        """An image in Artifact Registry (REGION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG): its tag exists."""
        path = _tag_path(ref)
        if path is None:
            return Finding("image", ref, UNKNOWN, "not a tagged Artifact Registry image: not checked")
        fix = "raytune image (builds and pushes it), then set cluster.worker_image to what it prints"
        return self.present("image", ref, "artifactregistry", path, fix, missing="no such image")

    def cached(self, disk_image: str, ref: str) -> Finding:
        """The disk image a config's GPU nodes boot with (cluster.image_cache): it exists, is READY, and holds the
        build of the worker image its tag names now."""
        project, name = image_cache.parse(disk_image)
        subject = f"image cache {disk_image}"
        fix = "raytune image --cache (builds the disk image from the pushed image), then set cluster.image_cache"

        def ask() -> Finding:
            disk = self.rest.get("compute", f"compute/v1/projects/{project}/global/images/{name}")
            if not isinstance(disk, dict):
                return Finding("image", subject, UNKNOWN, NOT_AN_OBJECT)
            in_place, said = image_cache.verdict(ref, disk, self.digest(ref))
            return Finding("image", subject, OK if in_place else PROBLEM, said, "" if in_place else fix)

        return _asked("image", subject, ask, "no such disk image: nodes pull the worker image", fix)

    def digest(self, ref: str) -> str | None:
        """The digest an Artifact Registry tag names now (its version); None where it cannot be read."""
        path = _tag_path(ref)
        if path is None:
            return None
        try:
            version = str((self.rest.get("artifactregistry", path) or {}).get("version") or "")
        except (errors.ControllerError, AttributeError):
            return None
        digest = version.rpartition("/versions/")[2]
        return digest if digest.startswith("sha256:") else None


def _tag_path(ref: str) -> str | None:
    """Artifact Registry's path of an image's tag (REGION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG); None for another
    registry, or a reference by digest."""
    host, _, rest = ref.partition("/")
    if not host.endswith("-docker.pkg.dev") or rest.count("/") < 2 or "@" in rest:
        return None
    project, repo, image_tag = rest.split("/", 2)
    image, _, tag = image_tag.rpartition(":") if ":" in image_tag else (image_tag, "", "latest")
    location = host.removesuffix("-docker.pkg.dev")
    package = image.replace("/", "%2F")
    return f"v1/projects/{project}/locations/{location}/repositories/{repo}/packages/{package}/tags/{tag}"


def cloud_doctor(settings: CliSettings, config: RunConfig | None, switches: Sequence[str]) -> Doctor:
    """The doctor of a real deployment: Google's APIs with application default credentials, the cluster's API
    server as the controller reaches it."""
    from functions.adapters.gke import GkePlatform
    from functions.adapters.gke_clusters import GkeClusters

    rest = GoogleRest()
    signed_in = rest.sign_in(settings.project)  # NoCredentials: nothing to ask, said once by the CLI
    quota = (
        f"quota project {signed_in.quota_project} (from {signed_in.quota_from})"
        if signed_in.quota_project
        else "a service account: no quota project needed"
    )
    platform = GkePlatform(settings.project or "", None, clusters=GkeClusters(settings.project or ""))

    def kube_for(spec: ClusterSpec) -> Any:
        kube = platform.reachable(spec)
        if kube is None:
            raise errors.TransientError(f"GKE cluster {spec.region}/{spec.gke_cluster} is not reachable")
        return kube

    caller = Finding("credentials", "application default credentials", OK, quota)
    return Doctor(settings, rest, kube_for, config, switches, caller=caller)
