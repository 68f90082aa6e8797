"""IAM on the wire: the real clients (Ray Train's storage, pyarrow's GcsFileSystem, google-cloud-storage) and
both functions over HTTP, against fake-gcs-server behind Cloud Storage's IAM (tests/fakes/gcs_iam.py), each
identity holding exactly what Terraform grants it (tests/contract/iam.py evaluates terraform/). Every request
must be let through, and every permission used must be one functions/core/permissions.py lists for that
identity on that bucket, so the table is proven against what the libraries really call."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from functions.core import permissions as p
from functions.core.config import RunConfig
from functions.core.runs import State
from tests.contract.iam import Deployment, assert_listed, client_at, serving, uses_on_wire
from tests.fakes.gcs_iam import IamGcs
from tests.fakes.http_events import post, pubsub_event, storage_event
from tests.harness import HF_TOKEN


def deployment(gcs_emulator, **variables) -> tuple[Deployment, object]:
    """terraform/ for a project of its own, its buckets made on the emulator under the names Terraform gives."""
    d = Deployment(project_id=f"p{uuid.uuid4().hex[:8]}", **variables)
    admin = client_at(gcs_emulator.url)
    for name in (
        d.bucket("runs"),
        d.bucket("configs"),
        *variables.get("policy_buckets", ()),
        *variables.get("dataset_buckets", ()),
    ):
        admin.create_bucket(name)
    return d, admin


def principal(d: Deployment, identity: str, subject: str | None = None) -> str:
    if identity == p.TRAINER:
        return f"principal://iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/{d.project}.svc.id.goog/subject/ns/{subject}/sa/default"
    return f"serviceAccount:raytune-{identity}@{d.project}.iam.gserviceaccount.com"


# -- the trainer -----------------------------------------------------------------------------------------------


def test_ray_train_storage_needs_the_bucket_read_terraform_now_grants(gcs_emulator):
    """Blocker 1 of issue 20: Ray Train's StorageContext writes its marker through pyarrow's create_dir, which
    reads the bucket (storage.buckets.get) when no folder marker exists yet. objectUser alone answers 403."""
    from ray.train.v2._internal.execution.storage import StorageContext

    from trainer.storage import filesystem

    d, _ = deployment(gcs_emulator)
    runs = d.bucket("runs")
    object_user = d.roles()["roles/storage.objectUser"]
    before = IamGcs(gcs_emulator.url, principal(d, p.TRAINER, "default"), lambda b, perm: perm in object_user)
    after = IamGcs(gcs_emulator.url, principal(d, p.TRAINER, "default"), d.storage_permissions(p.TRAINER, "default"))
    with serving(before) as url, emulator(url):
        fs, path = filesystem(f"gs://{runs}/checkpoints")
        with pytest.raises(OSError, match=r"storage\.buckets\.get"):
            StorageContext(path, "run-1", storage_filesystem=fs)
    assert [a.denied.permission for a in before.refused()] == ["storage.buckets.get"]
    with serving(after) as url, emulator(url):
        fs, path = filesystem(f"gs://{runs}/checkpoints")
        StorageContext(path, "run-1", storage_filesystem=fs)
    assert_listed(d, after, p.TRAINER)
    assert (runs, "storage.buckets.get") in after.used()


@pytest.mark.slow
def test_a_training_run_needs_nothing_more_than_terraform_grants(gcs_emulator, tmp_path):
    """A whole tiny run through Ray Train with every byte through GCS: the dataset's shards listed and read
    from a dataset bucket, the storage context, checkpoints uploaded and pruned, the evaluation's report,
    the adapter, result.json; the trainer holding exactly its grants in namespace default."""
    from tests.trainer.jobs import finish, start_job
    from trainer import tiny

    d, admin = deployment(gcs_emulator, dataset_buckets=["datasets-" + uuid.uuid4().hex[:6]])
    runs, datasets = d.bucket("runs"), d.variables["dataset_buckets"][0]
    shard = tmp_path / "part-0.parquet"
    tiny.product_dataset(16, seed=3).to_parquet(str(shard))
    admin.bucket(datasets).blob("products/part-0.parquet").upload_from_filename(str(shard))
    cfg = RunConfig.model_validate(
        {
            "name": "wire",
            "model": {"id": "tiny://gemma3", "dtype": "float32"},
            "dataset": {"id": f"gs://{datasets}/products", "eval_fraction": 0.25},
            "training": {"epochs": 1, "per_device_batch_size": 2, "max_length": 256, "keep_checkpoints": 1},
            "evaluation": {"samples": 2, "max_new_tokens": 4},
            "scaling": {"nodes": 1, "gpus_per_node": 0},
            "storage_path": f"gs://{runs}/checkpoints",
        }
    )
    proxy = IamGcs(gcs_emulator.url, principal(d, p.TRAINER, "default"), d.storage_permissions(p.TRAINER, "default"))
    log = tmp_path / "job.log"
    with serving(proxy) as url:
        env = {"STORAGE_EMULATOR_HOST": url, "RAYTUNE_DATA_CACHE": str(tmp_path / "cache")}
        finish(start_job(cfg, "wire-1", log, env=env), log, timeout=300)
    result = json.loads(admin.bucket(runs).blob("checkpoints/wire-1/result.json").download_as_bytes())
    assert result["adapter_path"].startswith(f"gs://{runs}/checkpoints/wire-1/")
    assert result["evaluation"]["report_path"].endswith("/report.html")
    stored = {b.name for b in admin.list_blobs(runs, prefix="checkpoints/wire-1/")}
    adapter = result["adapter_path"].removeprefix(f"gs://{runs}/")
    assert {
        f"{adapter}/adapter_model.safetensors",
        result["evaluation"]["report_path"].removeprefix(f"gs://{runs}/"),
    } <= stored
    assert_listed(d, proxy, p.TRAINER)
    used = uses_on_wire(d, proxy)
    assert {("bucket:runs", "storage.buckets.get"), ("bucket:runs", "storage.objects.create")} <= used
    assert {("bucket:datasets", "storage.objects.list"), ("bucket:datasets", "storage.objects.get")} <= used


def test_the_trainer_cannot_rewrite_the_functions_records(gcs_emulator):
    """Issue 21: trainer pods had object write on the whole runs bucket, so a queued run's record (and the
    allocations, champion and nightly pointers) could be rewritten from any pod. Terraform's IAM condition now
    confines the trainer to checkpoints/ there; the real client is refused everything else, and still lists."""
    from google.api_core.exceptions import Forbidden

    d, admin = deployment(gcs_emulator)
    runs = d.bucket("runs")
    admin.bucket(runs).blob("runs/victim.json").upload_from_string("{}")
    proxy = IamGcs(gcs_emulator.url, principal(d, p.TRAINER, "default"), d.storage_permissions(p.TRAINER, "default"))
    with serving(proxy) as url:
        bucket = client_at(url).bucket(runs)
        bucket.blob("checkpoints/run-1/result.json").upload_from_string("{}")
        assert bucket.blob("checkpoints/run-1/result.json").download_as_bytes() == b"{}"
        for name in ("runs/victim.json", "runs/new.json", "clusters/x.json", "champions/shop.json", "nightly/a.json"):
            with pytest.raises(Forbidden, match=r"storage\.objects\.create"):
                bucket.blob(name).upload_from_string('{"state": "SUCCEEDED"}')
        with pytest.raises(Forbidden, match=r"storage\.objects\.get"):
            bucket.blob("runs/victim.json").download_as_bytes()
        with pytest.raises(Forbidden, match=r"storage\.objects\.delete"):
            bucket.blob("runs/victim.json").delete()
        assert "checkpoints/run-1/result.json" in {b.name for b in bucket.list_blobs()}
    assert admin.bucket(runs).blob("runs/victim.json").download_as_bytes() == b"{}"


# -- the functions ---------------------------------------------------------------------------------------------


@contextmanager
def emulator(url: str) -> Iterator[None]:
    """This process's storage clients (the functions', pyarrow's) go to `url` for the duration."""
    import os

    from functions.adapters.gcs import storage_client

    before = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = url
    storage_client.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = before
        storage_client.cache_clear()


KUBE_VERBS = {"GET": "get", "POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "update"}
KUBE_RESOURCES = {"secrets": "secrets", "configmaps": "configMaps", "pods": "pods", "events": "events"}


def kube_permissions(method: str, path: str, content_type: str) -> set[str]:
    """GKE's IAM check of a Kubernetes request: container.<resource>.<verb>, custom resources as
    thirdPartyObjects, an apply that may create needing create as well, and clusters.get for any call."""
    parts = path.split("?")[0].strip("/").split("/")
    namespaced = parts.index("namespaces") if "namespaces" in parts else None
    assert namespaced is not None, path
    kind, named = parts[namespaced + 2], len(parts) > namespaced + 3
    resource = "thirdPartyObjects" if parts[0] == "apis" else KUBE_RESOURCES[kind]
    if named and parts[-1] == "log":
        return {"container.clusters.get", "container.pods.getLogs"}
    verb = "list" if method == "GET" and not named else KUBE_VERBS[method]
    verbs = {verb, "create"} if "apply-patch" in content_type else {verb}
    return {"container.clusters.get"} | {f"container.{resource}.{v}" for v in verbs}


GKE_PERMISSIONS = {
    "get": {"container.clusters.get"},
    "create": {"container.clusters.create"},
    "update": {"container.clusters.update"},
}


@pytest.fixture
def functions_on_terraform(gcs_emulator, pubsub, kube_api):
    """The controller with Terraform's environment (policy buckets, storage and dataset buckets, regions)
    and its storage calls through the functions' IAM: the handlers served by functions-framework."""

    import dataclasses

    from functions.adapters.kube import Kube, api_client
    from functions.handlers import context
    from functions.handlers.settings import Settings
    from tests.harness import build_controller, serve_functions

    suffix = uuid.uuid4().hex[:6]
    d, admin = deployment(gcs_emulator, policy_buckets=[f"shared-{suffix}"], dataset_buckets=[f"datasets-{suffix}"])
    env = {k: v for k, v in d.module.local("function_env").items() if isinstance(v, str)}  # apply-time values left out
    settings = Settings.from_env({**env, "HF_TOKEN": HF_TOKEN})
    # Terraform's settings; the project, the runs bucket and the emulator's topics go to the harness itself.
    terraform = {
        f.name: getattr(settings, f.name)
        for f in dataclasses.fields(settings)
        if f.name not in ("project", "bucket", "watch_topic", "events_topic")
    }
    proxy = IamGcs(gcs_emulator.url, principal(d, p.FUNCTIONS), d.storage_permissions(p.FUNCTIONS))
    with serving(proxy) as url, emulator(url):
        harness = build_controller(
            settings.bucket,
            pubsub,
            lambda cluster: Kube(api_client(kube_api.url)),
            kube=kube_api,
            project=d.project,
            **terraform,
        )
        try:
            with serve_functions() as urls:
                yield {
                    "deployment": d,
                    "admin": admin,
                    "proxy": proxy,
                    "ctx": harness.ctx,
                    "kube": kube_api,
                    "gke": harness.gke,
                    "urls": urls,
                }
        finally:
            context.use(None)


def test_both_functions_need_nothing_more_than_terraform_grants(functions_on_terraform):
    """An upload to the configs bucket, a launch message naming a config in a policy bucket with checkpoints
    there, a nightly over a dataset bucket; the watcher reading each result.json and settling the runs."""
    f = functions_on_terraform
    d, admin, urls, kube, ctx = f["deployment"], f["admin"], f["urls"], f["kube"], f["ctx"]
    configs, shared, datasets = d.bucket("configs"), d.variables["policy_buckets"][0], d.variables["dataset_buckets"][0]
    cluster = {"gke_cluster": "raytune", "region": "us-central1"}
    one = {"nodes": 1}  # all three fit the RayCluster's 5 nodes: none queued

    def upload(bucket: str, name: str, body: bytes) -> int:
        blob = admin.bucket(bucket).blob(name)
        blob.upload_from_string(body)
        return blob.generation

    generation = upload(
        configs, "configs/shop.json", json.dumps({"name": "shop", "cluster": cluster, "scaling": one}).encode()
    )
    assert post(urls["launch"], storage_event(configs, "configs/shop.json", generation)).status_code == 200
    shared_cfg = {"name": "shared", "cluster": cluster, "scaling": one, "storage_path": f"gs://{shared}/ckpt"}
    upload(shared, "library/shared.json", json.dumps(shared_cfg).encode())
    message = {"config_uri": f"gs://{shared}/library/shared.json", "run_name": "crm"}
    assert post(urls["launch"], pubsub_event(message)).status_code == 200
    upload(datasets, "products/part-0.parquet", b"PAR1 shard")
    nightly = {
        "name": "nightly-shop",
        "cluster": cluster,
        "scaling": one,
        "dataset": {"id": f"gs://{datasets}/products"},
    }
    upload(shared, "library/nightly.json", json.dumps(nightly).encode())
    night = {"config_uri": f"gs://{shared}/library/nightly.json", "nightly": True}
    assert post(urls["launch"], pubsub_event(night)).status_code == 200

    records = [ctx.store.get(n.removeprefix("runs/").removesuffix(".json")) for n in ctx.store.blobs.list("runs/")]
    records = [r for r in records if r is not None]
    assert sorted(r.state for r in records) == [State.SUBMITTED] * 3, [(r.run_id, r.state, r.reason) for r in records]
    for record in records:
        storage = record.config["storage_path"].removeprefix("gs://")
        bucket, _, prefix = storage.partition("/")
        result = {"metrics": {"train_loss": 1.0}, "final_checkpoint": f"gs://{storage}/{record.run_id}/c/checkpoint"}
        upload(bucket, f"{prefix}/{record.run_id}/result.json", json.dumps(result).encode())  # as the trainer would
        kube.set_status("rayjobs", record.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    assert post(urls["watch"], pubsub_event({"kind": "tick"})).status_code == 200
    assert {ctx.store.get(r.run_id).state for r in records} == {State.SUCCEEDED}

    proxy = f["proxy"]
    assert_listed(d, proxy, p.FUNCTIONS)
    used = uses_on_wire(d, proxy)
    assert {("bucket:configs", "storage.objects.get"), ("bucket:policy", "storage.objects.get")} <= used
    assert ("bucket:datasets", "storage.objects.list") in used
    listed = {u.permission for u in p.uses_of(p.FUNCTIONS) if u.resource == "project"}
    on_kube = set().union(*(kube_permissions(*r) for r in kube.requests))
    on_gke = set().union(*(GKE_PERMISSIONS[c] for c in f["gke"].calls))
    assert on_kube | on_gke <= listed, sorted((on_kube | on_gke) - listed)
    assert {
        "container.secrets.create",
        "container.thirdPartyObjects.create",
        "container.clusters.get",
    } <= on_kube | on_gke


def test_a_bucket_terraform_does_not_grant_is_a_rejected_run_not_a_403_later(functions_on_terraform):
    """What the policy lets through is what the grants allow (test_iam_grants holds the env equals the grants):
    a storage_path in the configs bucket, readable but not writable by the trainer, is refused at launch."""
    f = functions_on_terraform
    configs = f["deployment"].bucket("configs")
    body = {"config": {"name": "bad", "storage_path": f"gs://{configs}/ckpt"}}
    assert post(f["urls"]["launch"], pubsub_event(body)).status_code == 200
    [name] = f["ctx"].store.blobs.list("runs/")
    record = f["ctx"].store.get(Path(name).stem)
    assert record.state == State.REJECTED and "policy storage_buckets: storage_path names bucket" in record.reason
    assert not f["proxy"].refused()
