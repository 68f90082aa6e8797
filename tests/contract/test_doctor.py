"""`raytune doctor` against the stand-ins of a deployment: Google's APIs as terraform/ makes them
(tests/fakes/google_apis.py, IAM answered from Terraform's grants and Google's published role permissions), Cloud
Storage behind its IAM (fake-gcs-server and tests/fakes/gcs_iam.py), the Kubernetes fake, and the real API server
with KubeRay's CRDs (older ones too). A healthy deployment is all ok (exit 0); each problem the doctor claims to
find is made to happen once and found, with its fix; what may not be asked is unknown, never ok."""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager

import pytest
import requests

from functions.adapters.google_rest import GoogleRest
from functions.adapters.kube import Kube, api_client
from functions.cli.doctor import Doctor
from functions.cli.settings import CliSettings
from functions.core import doctor as d
from functions.core import permissions as p
from functions.core.config import RunConfig
from tests.contract.iam import Deployment, client_at
from tests.fakes.gcs_iam import IamGcs
from tests.fakes.google_apis import Breakage, FakeGoogle
from tests.fakes.kube import FakeKube

CALLER = "user:ops@example.com"
BLOCKER = (
    "Build failed with status: FAILURE and message: failed to Fetch: failed to download archive "
    "gs://gcf-v2-sources-123456789012-us-central1/raytune-watch/function-source.zip: Access to bucket "
    "gcf-v2-sources-123456789012-us-central1 denied. You must grant Storage Object Viewer permission to "
    "raytune-function-build@{project}.iam.gserviceaccount.com."
)


@contextmanager
def stand_ins(gcs_emulator, broken: Breakage | None = None, buckets=("runs", "configs", "build"), kube=None, **tfvars):
    """A deployment of terraform/ (its own project, `tfvars` its variables) on the stand-ins; yields (settings,
    doctor's REST client, the Google fake, the Kubernetes fake)."""
    deployment = Deployment(project_id=f"p{uuid.uuid4().hex[:8]}", operators=[CALLER], **tfvars)
    admin = client_at(gcs_emulator.url)
    for name in buckets:
        admin.create_bucket(deployment.bucket(name))
    google = FakeGoogle(deployment, CALLER, broken=broken).start()
    allowed = deployment.storage_permissions(p.OPERATOR, CALLER)
    storage = IamGcs(gcs_emulator.url, CALLER, allowed, policy=google.bucket_policy).start()
    fake_kube = kube or FakeKube().start()
    try:
        settings = CliSettings(
            project=deployment.project,
            region="us-central1",
            runs_bucket=deployment.bucket("runs"),
            configs_bucket=deployment.bucket("configs"),
            build_bucket=deployment.bucket("build"),
            launch_topic=f"projects/{deployment.project}/topics/raytune-launch",
            watch_topic=f"projects/{deployment.project}/topics/raytune-watch",
            repository="raytune",
            name="raytune",
            gke_cluster="raytune",
            hf_token_secret="raytune-hf-token",
        )
        rest = GoogleRest(
            requests.Session(), {**google.endpoints(), "storage": storage.url}
        )  # the stand-ins take no credentials
        yield settings, rest, google, fake_kube
    finally:
        google.stop()
        storage.stop()
        if kube is None:
            fake_kube.stop()


def doctor(settings, rest, kube, config: RunConfig | None = None, switches=()) -> tuple[list[d.Finding], int]:
    """The doctor on the stand-ins, with these of Terraform's switches on."""
    return Doctor(settings, rest, lambda spec: Kube(api_client(kube.url)), config, switches).run()


def problems(findings) -> dict[str, d.Finding]:
    return {f"{f.check} {f.subject}": f for f in findings if f.status == d.PROBLEM}


def test_a_healthy_deployment_is_all_ok(gcs_emulator):
    with stand_ins(gcs_emulator) as (settings, rest, _google, kube):
        findings, skipped = doctor(settings, rest, kube)
    print(d.report(findings, skipped))
    assert [f for f in findings if f.status != d.OK] == []
    assert d.exit_code(findings) == 0
    checks = {f.check for f in findings}
    assert checks == {"project", "api", "bucket", "topic", "subscription", "scheduler", "secret", "function"} | {
        "iam",
        "gke",
        "kube",
        "kuberay",
        "gpu",
        "image",
    }
    assert {f.subject for f in findings if f.check == "api"} == set(d.REQUIRED_APIS)
    # Google's own identities were asked about, the function build on Google's copy of its source among them.
    asked = {f.subject for f in findings if f.check == "iam"}
    assert (
        "function-build storage.objects.get on //storage.googleapis.com/projects/_/buckets/"
        + ("gcf-v2-sources-123456789012-us-central1")
        in asked
    )
    assert any(s.startswith("scheduler-agent pubsub.topics.publish") for s in asked)
    assert any(s.startswith("operator ") for s in asked)  # the caller, through testIamPermissions
    assert skipped > 0  # uses on resources raytune.toml does not name (the push subscriptions, ...)


def test_the_image_cache_builders_grants_are_asked_of_google_with_the_switch_on(gcs_emulator):
    """image_cache=true and `raytune doctor --image-cache`: the build's Compute grant, its actAs on the VM's account
    and the VM's reads are each asked of Google (the stand-in answers from Terraform's grants) and hold; with the
    build's Compute grant gone, each call it covered is a problem naming the identity."""
    dropped = Breakage(dropped={"google_project_iam_member.image_build_cache_disks[0]"})
    for broken in (None, dropped):
        with stand_ins(gcs_emulator, broken, image_cache=True) as (settings, rest, _google, kube):
            findings, _ = doctor(settings, rest, kube, switches=[p.IMAGE_CACHE])
        asked = {f.subject: f.status for f in findings if f.check == "iam"}
        vm = [s for s in asked if s.startswith(f"{p.IMAGE_CACHE_VM} ")]
        assert len(vm) == 2 and all(asked[s] == d.OK for s in vm), vm
        building = {s: status for s, status in asked.items() if s.startswith(f"{p.IMAGE_BUILD} compute.")}
        listed = {
            u.permission for u in p.uses_of(p.IMAGE_BUILD, [p.IMAGE_CACHE]) if u.permission.startswith("compute.")
        }
        assert {s.split()[1] for s in building} == listed
        if broken is None:
            assert [f for f in findings if f.status != d.OK] == []
        else:
            assert set(building.values()) == {d.PROBLEM}
            assert {s for s, status in asked.items() if status == d.PROBLEM} == set(building)


def test_three_faults_each_found_with_its_fix(gcs_emulator):
    """The issue's blocker as a new project meets it (no read of gcf-v2-sources: the build fails), an API left
    disabled, and a secret with no version."""
    broken = Breakage(
        dropped={"google_project_iam_member.function_build_sources"},
        disabled={"cloudscheduler.googleapis.com"},
        no_secret_version=True,
    )
    with stand_ins(gcs_emulator, broken) as (settings, rest, _google, kube):
        broken.failed["raytune-watch"] = BLOCKER.format(project=settings.project)
        findings, skipped = doctor(settings, rest, kube)
    report = d.report(findings, skipped)
    print(report)
    found = problems(findings)
    assert set(found) == {
        "iam function-build storage.objects.get on //storage.googleapis.com/projects/_/buckets/"
        "gcf-v2-sources-123456789012-us-central1",
        # the same grant reads the apply's access probe
        f"iam function-build storage.objects.get on //storage.googleapis.com/projects/_/buckets/{settings.build_bucket}"
        "/objects/function-build-probe/raytune-doctor-probe",
        "api cloudscheduler.googleapis.com",
        "function raytune-watch",
        "secret raytune-hf-token",
    }, report
    assert "You must grant Storage Object Viewer" in found["function raytune-watch"].detail
    assert "its build identity has no grant to read it" in found["function raytune-watch"].detail
    assert found["function raytune-watch"].fix == "terraform apply (terraform/iam.tf grants it)"
    assert found["api cloudscheduler.googleapis.com"].fix == (
        "gcloud services enable cloudscheduler.googleapis.com (terraform apply does)"
    )
    assert "gcloud secrets versions add raytune-hf-token" in found["secret raytune-hf-token"].fix
    # The scheduler's own API refused: its job could not be asked, which is unknown, not ok.
    [job] = [f for f in findings if f.check == "scheduler"]
    assert job.status == d.UNKNOWN
    assert d.exit_code(findings) == 1


def test_a_build_refused_by_a_grant_that_exists_is_told_from_a_missing_one(gcs_emulator):
    """The first apply's other failure: the grant is written but had not taken effect when the build ran (IAM
    propagation). The policy grants the read now, so the fix is a rebuild, not a grant."""
    broken = Breakage()
    with stand_ins(gcs_emulator, broken) as (settings, rest, _google, kube):
        broken.failed["raytune-watch"] = BLOCKER.format(project=settings.project)
        findings, _ = doctor(settings, rest, kube)
    found = problems(findings)
    assert set(found) == {"function raytune-watch"}, d.report(findings)
    assert (
        "granted that read now: the grant had not taken effect when it built" in found["function raytune-watch"].detail
    )
    assert found["function raytune-watch"].fix.startswith("terraform apply (it rebuilds the function")


def test_the_dry_run_is_what_a_launch_applies_under_the_deployed_policy(gcs_emulator):
    """The operator's policy as the launch function has it deployed (its environment, from Terraform) decides what
    the dry run renders, by the launch's own rule (Policy.fixed) and assembly, in the launch's order."""
    from functions.core import manifests
    from functions.handlers.settings import policy_from_env

    tfvars = {"policy_capacity": [{"kind": "spot"}], "policy_accelerator": "H200"}
    with stand_ins(gcs_emulator, **tfvars) as (settings, rest, google, kube):
        findings, _ = doctor(settings, rest, kube)
        env = google.function_env()
    assert not problems(findings), d.report(findings)
    applied = [(o["kind"], o["metadata"]["name"]) for o in kube.dry_runs]
    launch_cfg = policy_from_env(env).fixed(RunConfig())
    launched = manifests.assemble(launch_cfg, "doctor-dry-run", {"trainer/__init__.py": b""}, "0" * 64).in_order()
    assert applied == [(o["kind"], o["metadata"]["name"]) for o in launched]
    assert [kind for kind, _ in applied] == ["ConfigMap", "ComputeClass", "RayCluster", "RayJob"]
    [cluster] = [o for o in kube.dry_runs if o["kind"] == "RayCluster"]
    [group] = cluster["spec"]["workerGroupSpecs"]
    [compute_class] = [o for o in kube.dry_runs if o["kind"] == "ComputeClass"]
    assert (
        group["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"]
        == (compute_class["metadata"]["name"])
    )
    [spot] = compute_class["spec"]["priorities"]  # the policy's list, on the policy's accelerator
    assert spot["spot"] is True and spot["gpu"]["type"] == "nvidia-h200-141gb"


def gpu_node(name: str, version: str = "v1.33.5-gke.1080000") -> dict:
    """A B200 node as GKE makes one for a run (Autopilot's labels, capacity, the kubelet's version)."""
    labels = {"cloud.google.com/gke-accelerator": "nvidia-b200", "cloud.google.com/gke-gpu-driver-version": "latest"}
    status = {"capacity": {"nvidia.com/gpu": "8", "cpu": "224"}, "nodeInfo": {"kubeletVersion": version}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "status": status}


def test_gpu_nodes_are_reported_with_the_driver_their_run_read(gcs_emulator):
    """The driver is on no Kubernetes object: the run on the node read it before its workers started and kept it
    in its run folder (trainer/preflight.py). A driver that runs the image's CUDA is ok; one too old a problem
    naming both; a node no run has read is unknown, with the command that reads it."""
    import datetime as dt

    from functions.core.result import GpuDriverSeen
    from functions.core.runs import RunRecord, State, Transition

    with stand_ins(gcs_emulator) as (settings, rest, _google, kube):
        admin = client_at(gcs_emulator.url).bucket(settings.runs_bucket)
        readings = {
            "good": GpuDriverSeen(node="gke-a4-1", driver="580.82.07", cuda="13.0"),
            "old": GpuDriverSeen(node="gke-a4-2", driver="570.133.20", cuda="13.0", problem="older than 580.65.06"),
        }
        for run_id, reading in readings.items():
            now = dt.datetime.now(dt.UTC)
            record = RunRecord(
                run_id=run_id,
                state=State.RUNNING,
                source={"kind": "upload"},
                created_at=now,
                updated_at=now,
                history=[Transition(state=State.RUNNING, at=now)],
                config={"storage_path": f"gs://{settings.runs_bucket}/checkpoints"},
            )
            admin.blob(f"runs/{run_id}.json").upload_from_string(record.model_dump_json())
            admin.blob(f"checkpoints/{run_id}/gpu-driver.json").upload_from_string(reading.model_dump_json())
        for node, run_id in (("gke-a4-1", "good"), ("gke-a4-2", "old"), ("gke-a4-3", "fresh")):
            kube.put("nodes", gpu_node(node), "")
            pod = {"metadata": {"name": f"{run_id}-worker", "labels": {"raytune.dev/run-id": run_id}}}
            kube.put("pods", {**pod, "spec": {"nodeName": node}})
        kube.put("nodes", {"metadata": {"name": "cpu-1"}, "status": {"capacity": {"cpu": "4"}}}, "")
        findings, _ = doctor(settings, rest, kube)
    gpus = {f.subject: f for f in findings if f.check == "gpu"}
    assert set(gpus) == {"gke-a4-1", "gke-a4-2", "gke-a4-3"}, d.report(findings)
    assert gpus["gke-a4-1"].status == d.OK
    assert gpus["gke-a4-1"].detail == (
        "nvidia-b200 on GKE 1.33.5-gke.1080000, driver latest 580.82.07, the image's CUDA 13.0 (read by good)"
    )
    assert gpus["gke-a4-2"].status == d.PROBLEM and "570.133.20" in gpus["gke-a4-2"].detail
    assert "older than 580.65.06" in gpus["gke-a4-2"].detail
    assert gpus["gke-a4-3"].status == d.UNKNOWN and "run fresh has not read it yet" in gpus["gke-a4-3"].detail
    assert gpus["gke-a4-3"].fix == "kubectl debug node/gke-a4-3 -it --image=busybox -- cat /proc/driver/nvidia/version"


def test_what_is_missing_old_or_off_is_a_problem(gcs_emulator):
    broken = Breakage(
        missing={"raytune-launch", "raytune-watch-tick"}, gke_version="1.31.5-gke.1000", ray_operator=False
    )
    with stand_ins(gcs_emulator, broken, buckets=("runs", "configs")) as (settings, rest, _google, kube):
        findings, _ = doctor(settings, rest, kube)
    found = problems(findings)
    assert {"topic launch", "scheduler raytune-watch-tick", f"bucket {settings.build_bucket}"} <= set(found)
    assert found["gke us-central1/raytune version"].detail == "1.31.5-gke.1000 (needs 1.32.2-gke.1652000)"
    assert "--update-addons=RayOperator=ENABLED" in found["gke us-central1/raytune Ray operator add-on"].fix
    assert d.exit_code(findings) == 1


def test_what_the_caller_may_not_ask_is_unknown_never_ok(gcs_emulator):
    with stand_ins(gcs_emulator, Breakage(troubleshooter_forbidden=True)) as (settings, rest, _google, kube):
        findings, _ = doctor(settings, rest, kube)
    others = [f for f in findings if f.check == "iam" and not f.subject.startswith(("operator ", "trainer "))]
    assert others and {f.status for f in others} == {d.UNKNOWN}
    assert all("iam.roles.get" in f.detail for f in others)
    assert not problems(findings) and d.exit_code(findings) == 2
    # the trainer's Workload Identity principal is evaluated from the policies, which the caller may read
    assert {f.status for f in findings if f.subject.startswith("trainer ")} == {d.OK}


def test_the_trainers_workload_identity_is_evaluated_from_the_policies_troubleshooter_refuses_it(gcs_emulator):
    """Troubleshooter (the stand-in refuses what it refuses) is never asked about the principal:// identifier; the
    grants are read from the bucket's, topic's and project's policies, conditions included, and asked about an
    object inside checkpoints/, where Terraform grants them. A grant never applied is a problem; policies the caller
    may not read are unknown."""
    with stand_ins(gcs_emulator) as (settings, rest, _google, kube):
        findings, _ = doctor(settings, rest, kube)
    trainer = [f for f in findings if f.subject.startswith("trainer ")]
    assert trainer and {f.status for f in trainer} == {d.OK}
    assert any("/objects/checkpoints/raytune-doctor-probe" in f.subject for f in trainer)
    writes = [f.subject for f in trainer if "storage.objects.create" in f.subject]
    assert writes and all(w.endswith("/objects/checkpoints/raytune-doctor-probe") for w in writes)  # never the bucket
    deployment = Deployment(project_id="p", operators=[CALLER])
    [objects] = [
        g.address for g in deployment.grants() if g.identity == p.TRAINER and g.role == "roles/storage.objectUser"
    ]
    [reader] = [g.address for g in deployment.grants() if g.identity == p.OPERATOR and "policy_reader" in g.role]
    with stand_ins(gcs_emulator, Breakage(dropped={objects})) as (settings, rest, _google, kube):
        found = problems(doctor(settings, rest, kube)[0])
    assert {k for k in found if k.startswith("iam trainer storage.objects.")} == {
        f"iam trainer storage.objects.{verb} on //storage.googleapis.com/projects/_/buckets/{settings.runs_bucket}"
        f"/objects/checkpoints/raytune-doctor-probe"
        for verb in ("get", "create", "delete")
    }
    with stand_ins(gcs_emulator, Breakage(dropped={reader})) as (settings, rest, _google, kube):
        findings, _ = doctor(settings, rest, kube)
    trainer = [f for f in findings if f.subject.startswith("trainer ")]
    assert {f.status for f in trainer} == {d.UNKNOWN} and all("IAM policies" in f.detail for f in trainer)


def test_the_trainer_image_a_config_names_is_looked_up(gcs_emulator):
    image = "us-central1-docker.pkg.dev/{project}/raytune/raytune-trainer:v1"
    with stand_ins(gcs_emulator, Breakage(tags={"raytune-trainer:v1"})) as (settings, rest, _google, kube):
        cfg = RunConfig.model_validate({"cluster": {"worker_image": image.format(project=settings.project)}})
        findings, _ = doctor(settings, rest, kube, cfg)
        _google.broken.tags.clear()
        missing, _ = doctor(settings, rest, kube, cfg)
    assert [f.status for f in findings if f.check == "image"] == [d.OK, d.OK]
    [gone] = [f for f in missing if f.check == "image" and f.status == d.PROBLEM]
    assert gone.detail == "no such image" and gone.fix.startswith("raytune image")


def test_the_image_cache_is_checked_against_the_build_the_tag_names_now(gcs_emulator):
    """cluster.image_cache: the disk image exists, is READY and holds the worker image's current build (its labels
    as `raytune image --cache` sets them, held against the tag's version in Artifact Registry); an older build, a
    disk image still being made or one gone is a problem with the command that makes it."""
    from functions.core import image_cache

    image = "us-central1-docker.pkg.dev/{project}/raytune/trainer:2.60.0"
    built, rebuilt = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    disk_name = image_cache.disk_image_name(built)
    broken = Breakage(tags={"trainer:2.60.0"}, digests={"trainer:2.60.0": built})
    with stand_ins(gcs_emulator, broken) as (settings, rest, google, kube):
        ref = image.format(project=settings.project)
        cache = f"projects/{settings.project}/global/images/{disk_name}"
        cfg = RunConfig.model_validate({"cluster": {"worker_image": ref, "image_cache": cache}})
        google.broken.disk_images[disk_name] = {"status": "READY", "labels": image_cache.labels_for(ref, built)}
        ready, _ = doctor(settings, rest, kube, cfg)
        google.broken.digests["trainer:2.60.0"] = rebuilt  # the tag was pushed again
        stale, _ = doctor(settings, rest, kube, cfg)
        google.broken.disk_images[disk_name]["status"] = "PENDING"
        pending, _ = doctor(settings, rest, kube, cfg)
        google.broken.disk_images.clear()
        gone, _ = doctor(settings, rest, kube, cfg)
    subject = f"image cache {cache}"
    [ok] = [f for f in ready if f.subject == subject]
    assert ok.status == d.OK and ok.detail == f"READY, holds {ref} at sha256:aaaaaaaaaaaa, the tag's current build"
    # the allowlist a launch applies is dry-run with the rest of what it renders
    assert any(f.subject == "GCPResourceAllowlist node.gke.io/v1" and f.status == d.OK for f in ready)
    for findings, said in (
        (stale, "holds an older build of"),
        (pending, "status PENDING"),
        (gone, "no such disk image"),
    ):
        [found] = [f for f in findings if f.subject == subject]
        assert found.status == d.PROBLEM and said in found.detail, found
        assert found.fix.startswith("raytune image --cache")


def test_a_cli_run_prints_the_report_and_exits_with_its_code(gcs_emulator, monkeypatch, capsys, tmp_path):
    from functions.cli import doctor as cli_doctor
    from functions.cli import main

    with stand_ins(gcs_emulator, Breakage(disabled={"eventarc.googleapis.com"})) as (settings, rest, _google, kube):
        toml = tmp_path / "raytune.toml"
        toml.write_text("".join(f'{k} = "{v}"\n' for k, v in vars(settings).items() if v and k != "source"))
        monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(toml))
        made = []

        def standing_in(found, config, switches):
            made.append(found)
            return Doctor(found, rest, lambda spec: Kube(api_client(kube.url)), config, switches)

        monkeypatch.setattr(cli_doctor, "cloud_doctor", standing_in)
        assert main(["doctor"]) == 1
        text = capsys.readouterr().out
        assert main(["doctor", "--json"]) == 1
        answer = json.loads(capsys.readouterr().out)
    assert made[0].project == settings.project and made[0].gke_cluster == "raytune"
    assert "problem  api          eventarc.googleapis.com: not enabled" in text
    assert text.splitlines()[-1].endswith("unknown" if "(" not in text.splitlines()[-1] else "not asked)")
    assert [f["subject"] for f in answer["findings"] if f["status"] == "problem"] == ["eventarc.googleapis.com"]


# -- the real API server and KubeRay's CRDs -------------------------------------------------------------------


@pytest.mark.cluster_scoped
def test_the_real_server_admits_what_a_launch_renders_and_names_an_older_crd(gcs_emulator, control_plane):
    """A server-side dry run of the rendered RayCluster and RayJob on the real API server: ok with KubeRay 1.5.2's
    CRDs; an older RayJob CRD (activeDeadlineSeconds removed) and a missing ComputeClass CRD are problems naming
    what lacks it."""
    from tests.contract.test_realkube import older_rayjob_crd

    def kube_for(spec):
        return control_plane.kube()

    capacity = RunConfig.model_validate({"scaling": {"nodes": 1, "capacity": [{"kind": "spot"}]}})
    control_plane.kubectl("delete", "crd", "computeclasses.cloud.google.com", "--ignore-not-found", "--wait=true")
    with stand_ins(gcs_emulator) as (settings, rest, _google, _kube):
        healthy, _ = Doctor(settings, rest, kube_for).run()
        with older_rayjob_crd(control_plane):
            old, _ = Doctor(settings, rest, kube_for, capacity).run()
    assert {(f.subject, f.status) for f in healthy if f.check == "kuberay"} == {
        ("RayCluster ray.io/v1", d.OK),
        ("RayJob ray.io/v1", d.OK),
    }
    found = problems(old)
    assert set(found) == {"kuberay RayJob ray.io/v1", "gke ComputeClass cloud.google.com/v1"}, d.report(old)
    assert found["kuberay RayJob ray.io/v1"].detail.startswith(
        "the cluster's KubeRay does not know .spec.activeDeadlineSeconds"
    )
    assert found["gke ComputeClass cloud.google.com/v1"].detail.startswith("the cluster has no ComputeClass CRD")


@pytest.mark.parametrize("name", ["raytune", "team-a"])
def test_the_doctor_names_what_terraform_makes(name):
    """raytune.toml as Terraform writes it (output cli_config) gives the doctor the names Terraform gives: the
    service accounts, topics, functions, scheduler job, secret; and the APIs it asks about are the ones
    terraform/apis.tf enables."""
    import tomllib

    from functions.cli.settings import load

    deployment = Deployment(project_id="proj", name=name, region="europe-west4")
    from tests.contract.tfeval import _parse

    output = next(b for b in deployment.module.blocks if b.kind == "output" and b.labels == ("cli_config",))
    toml = tomllib.loads(str(deployment.module.eval(output.body["value"], {})))
    # The heredoc's interpolations, as Terraform fills them in.
    [filled] = _parse("locals {\n" + "".join(f'  {k} = "{v}"\n' for k, v in toml.items()) + "}\n")
    values = {k: str(deployment.module.eval(v, {})) for k, v in filled.body.items()}
    settings = load(env={}, flags=values)
    names = d.Deployment(
        "proj", "42", "europe-west4", settings.name or "", hf_token_secret=settings.hf_token_secret or ""
    )
    for account in deployment.module.instances("google_service_account"):
        identity = {"functions": p.FUNCTIONS, "trigger": p.TRIGGER}.get(account.name) or account.name.replace("_", "-")
        assert names.account(identity) == f"serviceAccount:{account.get('account_id')}@proj.iam.gserviceaccount.com"
    topics = {str(t.get("name")) for t in deployment.module.instances("google_pubsub_topic")}
    assert {names.topic(t).rsplit("/", 1)[1] for t in ("launch", "watch", "run-events", "dead-letter")} == topics
    functions = {str(f.get("name")) for f in deployment.module.instances("google_cloudfunctions2_function")}
    assert {f"{settings.name}-{key}" for key in d.FUNCTIONS} == functions
    entries = {str(k).replace("_", "-"): v["entry_point"] for k, v in deployment.module.local("functions").items()}
    assert entries == d.FUNCTIONS
    jobs = {str(j.get("name")) for j in deployment.module.instances("google_cloud_scheduler_job")}
    assert f"{settings.name}-watch-tick" in jobs
    assert settings.gke_cluster == deployment.module.var("gke_cluster_name")
    assert settings.hf_token_secret == deployment.module.var("hf_token_secret_id")
    apis = {str(i.get("service")) for i in deployment.module.instances("google_project_service")}
    assert apis == set(d.REQUIRED_APIS)


def test_every_region_of_the_deployment_has_its_cluster_asked_about(gcs_emulator):
    """Issue 55: a deployment of two regions (policy_regions) is two clusters; doctor asks about each, and a config
    naming a region with no cluster there gets its problem named."""
    import dataclasses

    with stand_ins(gcs_emulator, policy_regions=["europe-west4"]) as (settings, rest, _google, kube):
        both = dataclasses.replace(settings, regions='["us-central1", "europe-west4"]')
        findings, _ = doctor(both, rest, kube)
        elsewhere = RunConfig.model_validate({"cluster": {"region": "us-central1", "fallback_regions": ["asia-east1"]}})
        asked, _ = doctor(both, rest, kube, elsewhere)
    gke = {f.subject: f.status for f in findings if f.check == "gke"}
    for region in ("us-central1", "europe-west4"):
        assert gke[f"{region}/raytune version"] == d.OK and gke[f"{region}/raytune Ray operator add-on"] == d.OK
    assert problems(asked)["gke asia-east1/raytune"].detail == "no such cluster"


def test_inherited_grants_deny_policies_and_what_could_not_be_read(gcs_emulator):
    """As IAM decides: a grant on the project's folder is inherited (here to the deployment's cluster, a principal
    set of its own); a folder the caller may not read leaves a missing grant unknown, not a problem; a deny rule
    refuses whatever allows, and one whose condition is not evaluated here leaves the answer unknown."""
    deployment = Deployment(project_id="p", operators=[CALLER])
    [objects] = [
        g.address for g in deployment.grants() if g.identity == p.TRAINER and g.role == "roles/storage.objectUser"
    ]
    create = "iam trainer storage.objects.create"

    def trainer(findings, verb: str = "create") -> set[str]:
        return {f.status for f in findings if f.subject.startswith(f"trainer storage.objects.{verb} ")}

    with stand_ins(gcs_emulator, Breakage(dropped={objects})) as (settings, rest, google, kube):
        pool = google.member_of(p.TRAINER, "default").split("/subject/")[0].replace("principal://", "principalSet://")
        cluster = (
            f"https://container.googleapis.com/v1/projects/{settings.project}/locations/us-central1/clusters/raytune"
        )
        google.broken.folder = {
            "bindings": [{"role": "roles/storage.objectUser", "members": [f"{pool}/kubernetes.cluster/{cluster}"]}]
        }
        assert trainer(doctor(settings, rest, kube)[0]) == {d.OK}, "granted on the folder: inherited"
    with stand_ins(gcs_emulator, Breakage(dropped={objects}, folder={}, folder_unreadable=True)) as (
        settings,
        rest,
        _google,
        kube,
    ):
        findings, _ = doctor(settings, rest, kube)
    assert trainer(findings) == {d.UNKNOWN} and not [k for k in problems(findings) if k.startswith(create)]
    with stand_ins(gcs_emulator) as (settings, rest, google, kube):
        namespace = (
            google.member_of(p.TRAINER, "default").split("/subject/")[0].replace("principal://", "principalSet://")
        )
        rule = {
            "deniedPrincipals": [f"{namespace}/namespace/default"],
            "deniedPermissions": ["storage.googleapis.com/objects.create"],
        }
        google.broken.deny = [{"denyRule": rule}]
        findings, _ = doctor(settings, rest, kube)
        assert trainer(findings) == {d.PROBLEM} and trainer(findings, "get") == {d.OK}
        assert all(
            "denied by deny policy" in f.detail
            for f in findings
            if f.subject.startswith("trainer storage.objects.create")
        )
        conditioned = {**rule, "denialCondition": {"expression": "resource.matchTag('p/env', 'prod')"}}
        google.broken.deny = [{"denyRule": conditioned}]
        assert trainer(doctor(settings, rest, kube)[0]) == {d.UNKNOWN}


@pytest.mark.parametrize(
    ("rules", "status", "said"),
    [
        ([], d.OK, ""),
        ([{"allowAll": True}], d.OK, ""),
        ([{"denyAll": True}], d.PROBLEM, "denies every VM an external IP"),
        ([{"values": {"allowedValues": ["projects/p/zones/us-central1-a/instances/bastion"]}}], d.PROBLEM, "listed"),
        (
            [{"denyAll": True, "condition": {"expression": "resource.matchTag('p/vm', 'builder')"}}],
            d.UNKNOWN,
            "condition",
        ),
    ],
)
def test_the_cache_builders_external_ip_is_asked_of_the_org_policy_before_a_build(gcs_emulator, rules, status, said):
    """The builder's VM always gets an external IP (Daisy's default access config): with the switch on, doctor
    reads the project's effective constraints/compute.vmExternalIpAccess and says whether a build would be refused."""
    with stand_ins(gcs_emulator, Breakage(external_ip=rules), image_cache=True) as (settings, rest, _google, kube):
        findings, _ = doctor(settings, rest, kube, switches=[p.IMAGE_CACHE])
    [found] = [f for f in findings if f.check == "orgpolicy"]
    assert found.status == status and said in found.detail, found


def test_a_config_is_judged_by_the_launchs_own_judge_under_the_deployed_policy(gcs_emulator):
    """`raytune doctor CONFIG`: the launch's acceptance judge (functions/core/acceptance.py) with the deployment as
    the launch function has it (its environment): a config the launch would record REJECTED is a problem with the
    launch's own reasons; one it accepts is ok."""
    tfvars = {"policy_tracking_destinations": ["mlflow"]}
    refused = RunConfig.model_validate({"name": "tracked", "tracking": {"wandb": {"project": "p"}}})
    with stand_ins(gcs_emulator, **tfvars) as (settings, rest, _google, kube):
        findings, _ = Doctor(settings, rest, lambda spec: Kube(api_client(kube.url)), refused).run()
        [verdict] = [f for f in findings if f.check == "launch"]
        assert verdict.status == d.PROBLEM and "policy tracking_destinations" in verdict.detail, verdict
        fine = RunConfig.model_validate({"name": "quick"})
        findings, _ = Doctor(settings, rest, lambda spec: Kube(api_client(kube.url)), fine).run()
    assert [f.status for f in findings if f.check == "launch"] == [d.OK]
