"""Manifest rendering: golden output for the reference config, valid objects, safe entrypoints."""

import json
import os
import shlex
from pathlib import Path

import jsonpatch
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.cli import main as cli
from functions.core import manifests
from functions.core.allocation import group_name
from functions.core.config_file import parse_config
from tests.fakes.kuberay_fields import pod_templates, unknown_fields

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "manifests" / "reference.yaml"
K8S_VERSION = "1.33.0"
# A fixed code bundle, so the golden file does not change with every trainer edit.
CODE = {"trainer/__init__.py": b"", "trainer/train.py": b"print('train')\n"}
CODE_HASH = "0" * 64


def reference(**update):
    cfg = parse_config((ROOT / "examples" / "reference.json").read_bytes())
    return cfg.model_copy(update={"storage_path": "gs://my-bucket/checkpoints", **update})


def render_reference() -> list[dict]:
    env = {"RAYTUNE_WATCH_TOPIC": "projects/my-project/topics/raytune-watch"}
    return manifests.assemble(reference(), "gemma3-reference-0123456789", CODE, CODE_HASH, env=env).in_order()


def test_reference_manifests_match_golden():
    text = manifests.to_yaml(render_reference())
    if os.environ.get("REGENERATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "run with REGENERATE_GOLDEN=1 after an intended change"


def test_reference_cluster_follows_the_recipe():
    _, cluster, job = render_reference()
    head = cluster["spec"]["headGroupSpec"]
    container = head["template"]["spec"]["containers"][0]
    # The head also hosts a sweep's trial drivers: a resource of its own for them, quoted for KubeRay's shell.
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0", "resources": "'{\"raytune-trial-driver\": 64}'"}
    assert {p["containerPort"] for p in container["ports"]} == {6379, 8265, 10001}
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {"cpu": "24", "memory": "64Gi", "ephemeral-storage": "9Gi"}
    )
    assert container["env"] == [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "hf_api_token", "optional": True}},
        },
        # The tracking destinations' credentials, from the same Secret, each optional (docs/tracking.md).
        *(
            {"name": name, "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": name, "optional": True}}}
            for name in (
                "MLFLOW_TRACKING_TOKEN",
                "MLFLOW_TRACKING_USERNAME",
                "MLFLOW_TRACKING_PASSWORD",
                "WANDB_API_KEY",
            )
        ),
        {"name": "RAYTUNE_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        # Caches on the local SSD: one model download per node, shared by its 8 workers.
        {"name": "HF_HOME", "value": "/mnt/local-ssd/hf"},
        {"name": "HF_DATASETS_CACHE", "value": "/mnt/local-ssd/hf/datasets"},
    ]
    [group] = cluster["spec"]["workerGroupSpecs"]  # the run's own group: its nodes go exactly when it ends
    assert (group["groupName"], group["replicas"], group["minReplicas"], group["maxReplicas"]) == (
        group_name(job["metadata"]["name"]),
        2,
        2,
        2,
    )
    # Each node advertises the run's own resource, one unit per training worker; the job asks for it.
    # As KubeRay writes it itself (pod.go): JSON it parses back, single-quoted for `ray start` through a shell.
    quoted = group["rayStartParams"]["resources"]
    assert json.loads(shlex.split(f"--resources={quoted}")[0].removeprefix("--resources=")) == {group["groupName"]: 8}
    assert group["template"]["metadata"]["labels"] == {"raytune.dev/run-id": job["metadata"]["name"]}
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime["env_vars"]["RAYTUNE_WORKER_RESOURCE"] == group["groupName"]
    worker = group["template"]["spec"]
    # Autopilot's default ephemeral storage (1 GiB) is below one model download: sized for the caches.
    assert worker["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8", "ephemeral-storage": "200Gi"}
    assert worker["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-b200",
        "cloud.google.com/gke-gpu-driver-version": "latest",
        "cloud.google.com/gke-ephemeral-storage-local-ssd": "true",
        "cloud.google.com/reservation-name": "my-a4-reservation",
        "cloud.google.com/reservation-affinity": "specific",
    }
    mounts = {m["mountPath"] for m in worker["containers"][0]["volumeMounts"]}
    assert mounts == {"/code/", "/mnt/local-ssd/"}
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": "gemma3-tuning"}
    assert job["spec"]["jobId"] == job["metadata"]["name"] == "gemma3-reference-0123456789"


def test_objects_are_valid_for_kuberay_and_kubernetes():
    configmap, cluster, job = render_reference()
    kubernetes_validate.validate(configmap, K8S_VERSION, strict=True)
    kubernetes_validate.validate(manifests.secret(reference(), "hf_dummy"), K8S_VERSION, strict=True)
    for obj in (cluster, job):
        assert obj["apiVersion"] == "ray.io/v1"
        assert unknown_fields(obj) == []
    for template in pod_templates(cluster):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", **template["metadata"]},
            "spec": template["spec"],
        }
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_code_configmap_mounts_as_the_package():
    configmap, cluster, _ = render_reference()
    volume = cluster["spec"]["headGroupSpec"]["template"]["spec"]["volumes"][0]["configMap"]
    mounted = {item["path"]: configmap["data"][item["key"]] for item in volume["items"]}
    assert mounted == {path: content.decode() for path, content in CODE.items()}
    assert configmap["metadata"]["annotations"]["raytune.dev/code-sha256"] == CODE_HASH


@pytest.mark.parametrize("hostile", ["'; rm -rf / #", "$(curl evil)", "`id`", 'a"b\\c', "line\nbreak"])
def test_entrypoint_quotes_every_argument(hostile):
    cfg = reference(prompts=reference().prompts.model_copy(update={"system": hostile}))
    job = manifests.ray_job(cfg, "run-1", CODE_HASH, {})
    args = shlex.split(job["spec"]["entrypoint"])
    assert args[:7] == ["python", "-m", "trainer.train", "--run-id", "run-1", "--config-json", args[6]]
    assert len(args) == 7
    assert parse_config(args[6]) == cfg


@pytest.mark.parametrize("hostile", ["'; rm -rf / #", "$(curl evil)", '{"run_id": "a b"}'])
def test_a_local_jobs_variables_are_set_on_its_quoted_command(hostile):
    cfg = reference()
    command = manifests.entrypoint(cfg, "run-1", python="/venv/bin/python", env={"CHAMPION": hostile, "A": "1"})
    args = shlex.split(command)
    assert args[:3] == ["env", f"CHAMPION={hostile}", "A=1"]
    assert args[3:8] == ["/venv/bin/python", "-m", "trainer.train", "--run-id", "run-1"] and len(args) == 10
    assert parse_config(args[9]) == cfg


def test_runtime_env_pins_the_trainer_versions():
    _, _, job = render_reference()
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime["env_vars"]["PYTHONPATH"] == "/code"
    assert runtime["env_vars"]["RAYTUNE_WATCH_TOPIC"] == "projects/my-project/topics/raytune-watch"
    pins = dict(p.split("==") for p in runtime["pip"]["packages"])
    assert pins["torch"] == "2.13.0" and pins["trl"] == "1.16.0" and pins["transformers"] == "5.24.0"
    image_based = manifests.ray_job(
        reference(cluster=reference().cluster.model_copy(update={"dependencies": "image"})), "run-1", CODE_HASH, {}
    )
    assert "pip" not in yaml.safe_load(image_based["spec"]["runtimeEnvYAML"])


def test_render_command_prints_appliable_yaml(capsys):
    assert cli(["render", str(ROOT / "examples" / "reference.json"), "--bucket", "my-bucket"]) == 0
    out = capsys.readouterr().out
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "RayCluster", "RayJob"]
    assert "hf_api_token" not in json.dumps(docs[0])  # the Secret itself is never printed
    assert parse_config(shlex.split(docs[2]["spec"]["entrypoint"])[6]).storage_path == "gs://my-bucket/checkpoints"


def test_render_needs_a_storage_location(capsys):
    assert cli(["render", str(ROOT / "examples" / "reference.json")]) == 2
    assert "storage_path: not set" in capsys.readouterr().err


def _group(name: str, replicas: int) -> dict:
    return {"groupName": name, "replicas": replicas, "template": {"spec": {"containers": [{"name": "w"}]}}}


@settings(max_examples=300)
@given(
    read=st.lists(st.integers(0, 3), max_size=8),
    fates=st.lists(st.sampled_from(["keep", "resize", "drop"]), min_size=8, max_size=8),
    new=st.integers(0, 3),
    shuffle=st.randoms(use_true_random=False),
    reorder=st.booleans(),
)
def test_group_ops_turn_the_groups_as_read_into_the_wanted_list(read, fates, new, shuffle, reorder):
    """Applied by an RFC 6902 implementation (jsonpatch) to the groups as read, the operations leave exactly the
    wanted list; only the groups that change are sent unless the kept ones were reordered."""
    groups = [_group(f"g{i}", replicas) for i, replicas in enumerate(read)]
    wanted = []
    for group, fate in zip(groups, fates, strict=False):
        if fate != "drop":
            wanted.append(manifests.resized(group, group["replicas"] + 1) if fate == "resize" else group)
    if reorder:
        shuffle.shuffle(wanted)
    wanted += [_group(f"new{i}", 1) for i in range(new)]
    ops = manifests.group_ops(groups, wanted)
    patched = jsonpatch.apply_patch({"spec": {"workerGroupSpecs": groups}}, ops)
    assert patched["spec"]["workerGroupSpecs"] == wanted
    kept = [g["groupName"] for g in groups if g["groupName"] in {w["groupName"] for w in wanted}]
    if groups and [w["groupName"] for w in wanted[: len(kept)]] == kept:
        changed = sum(1 for g in groups if g not in wanted)  # dropped or resized
        assert len(ops) == changed + new, ops
        assert all(op["path"] != manifests.WORKER_GROUPS for op in ops)


def test_render_warns_when_a_local_only_config_is_rendered_for_the_cloud(capsys):
    """Issue 40: the quickstart (the tiny model and data, the trainer image's dependencies on stock Ray images)
    rendered for the cloud without a word; the cloud example renders with none."""
    quickstart = ROOT / "functions" / "local" / "quickstart.json"
    assert cli(["render", str(quickstart), "--bucket", "my-bucket"]) == 0
    warned = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 2)[2].split(" ", 1)[0] for line in warned] == [
        "model.id",
        "dataset.id",
        "cluster.dependencies",
    ]
    assert cli(["render", str(ROOT / "examples" / "cloud.yaml"), "--bucket", "my-bucket"]) == 0
    assert capsys.readouterr().err == ""


def test_one_assembly_gives_every_part_in_the_order_a_launch_applies_it():
    cfg = reference(
        scaling=reference().scaling.model_copy(
            update={
                "capacity": parse_config(
                    b'{"scaling": {"capacity": [{"kind": "spot"}, {"kind": "on-demand"}]}}'
                ).scaling.capacity
            }
        )
    )
    theirs = manifests.worker_group(cfg, "theirs-0123456789", 3, list(CODE), "old")
    objects = manifests.assemble(
        cfg,
        "run-1",
        CODE,
        CODE_HASH,
        groups={theirs["groupName"]: 1, group_name("run-1"): 2},
        seen=[theirs],
        stamp=7,
        owner="dep-1",
        hf_token="hf_dummy",
        job="run-1-a2",
    )
    kinds = [part["kind"] for part in objects.in_order()]
    assert kinds == ["Secret", "ConfigMap", "ComputeClass", "RayCluster", "RayJob"]
    groups = objects.cluster["spec"]["workerGroupSpecs"]
    # Another run's group kept as read (its code hash too), at its new size; the run's own rendered.
    assert groups[0] == {**theirs, "replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    assert groups[1] == manifests.worker_group(cfg, "run-1", 2, list(CODE), CODE_HASH)
    assert objects.cluster["metadata"]["annotations"][manifests.ALLOCATION_ANNOTATION] == "7"
    assert objects.job["metadata"]["name"] == "run-1-a2"
    assert {p["metadata"]["labels"].get(manifests.OWNER_LABEL) for p in (objects.cluster, objects.job)} == {"dep-1"}
    assert objects.capacity is not None and objects.capacity["metadata"]["labels"][manifests.OWNER_LABEL] == "dep-1"
    # Rendered for no deployment and no token: no Secret, no owner.
    rendered = manifests.assemble(cfg, "run-1", CODE, CODE_HASH)
    assert rendered.secret is None and manifests.OWNER_LABEL not in rendered.cluster["metadata"]["labels"]
    assert [g["replicas"] for g in rendered.cluster["spec"]["workerGroupSpecs"]] == [cfg.scaling.nodes]
