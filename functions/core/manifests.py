"""Pure rendering of the Kubernetes objects for a run: Secret, code ConfigMap, ComputeClass, GCPResourceAllowlist,
RayCluster, RayJob (ray.io/v1), assembled in one place (`assemble`) for `raytune render`, the golden file, doctor's
dry run and the GKE adapter, which only applies the parts in their order.

Only fields that KubeRay v1.3-v1.5 (the GKE Ray operator add-on) know are used. Nothing here talks to a
cluster; the same inputs always give the same objects, so applying them twice changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from functions.core import computeclass, image_cache, tracking
from functions.core.allocation import group_name
from functions.core.config import RunConfig
from functions.core.result import NODE_NAME_ENV, TRIAL_DRIVER_RESOURCE, TRIAL_DRIVERS, WORKER_RESOURCE_ENV

MANAGED_BY = {"app.kubernetes.io/managed-by": "raytune"}
RUN_LABEL = "raytune.dev/run-id"
# Which raytune deployment (its runs bucket) made a RayCluster or RayJob: two deployments may share a namespace,
# and each sweeps only its own.
OWNER_LABEL = "raytune.dev/deployment"
CODE_HASH_ANNOTATION = "raytune.dev/code-sha256"
ALLOCATION_ANNOTATION = "raytune.dev/allocation"  # the allocation version the worker group is sized for
# A digest of the RayCluster as applied, its worker groups and allocation stamp left out: a launch that finds it
# unchanged writes only the groups (functions/adapters/gke.py size), not the whole object again.
BASE_ANNOTATION = "raytune.dev/base-sha256"
WORKER_GROUPS = "/spec/workerGroupSpecs"  # their JSON pointer (group_ops)
HF_SECRET = "hf-secret"
HF_SECRET_KEY = "hf_api_token"
CODE_CONFIGMAP = "ray-job-cm"
CODE_MOUNT = "/code/"
SCRATCH = "/mnt/local-ssd/"
# Caches on the node's local SSD, shared by every Ray worker process of the pod: huggingface_hub locks each
# file while downloading, so one process downloads the model and the others wait for it.
CACHE_ENV = {"HF_HOME": f"{SCRATCH}hf", "HF_DATASETS_CACHE": f"{SCRATCH}hf/datasets"}
LOCAL_SSD = {"cloud.google.com/gke-ephemeral-storage-local-ssd": "true"}
RAY_PORTS = (("gcs", 6379), ("dashboard", 8265), ("client", 10001))


def owner_id(runs_bucket: str) -> str:
    """The deployment's label value: its runs bucket's name, or a digest of it when the name is not a valid
    label value (dotted names may be longer than 63 characters)."""
    if len(runs_bucket) <= 63 and re.fullmatch(r"[a-z0-9]([-_.a-z0-9]*[a-z0-9])?", runs_bucket):
        return runs_bucket
    return "b-" + hashlib.sha256(runs_bucket.encode()).hexdigest()[:40]


def ownership(owner: str | None) -> dict[str, str]:
    """The labels of the objects a deployment owns (and sweeps); None: rendered for no deployment."""
    return {**MANAGED_BY, OWNER_LABEL: owner} if owner else dict(MANAGED_BY)


def secret(cfg: RunConfig, hf_token: str | None, credentials: dict[str, str] | None = None) -> dict[str, Any]:
    """The Secret the pods read their credentials from: the HF token, and the tracking destinations' (each under
    its variable's name, functions/core/tracking.py CREDENTIALS)."""
    data = {HF_SECRET_KEY: hf_token} if hf_token else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": HF_SECRET, "namespace": cfg.cluster.namespace, "labels": dict(MANAGED_BY)},
        "type": "Opaque",
        "stringData": {**data, **(credentials or {})},
    }


def _configmap_key(path: str) -> str:
    # ConfigMap keys may not hold "/"; module names never hold "-", so this is reversible.
    return path.replace("/", "-")


def code_configmap(cfg: RunConfig, files: dict[str, bytes], code_hash: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CODE_CONFIGMAP,
            "namespace": cfg.cluster.namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {CODE_HASH_ANNOTATION: code_hash},
        },
        "data": {_configmap_key(path): content.decode() for path, content in sorted(files.items())},
    }


def _volumes(code_paths: list[str]) -> list[dict[str, Any]]:
    items = [{"key": _configmap_key(path), "path": path} for path in sorted(code_paths)]
    return [
        {"name": "code", "configMap": {"name": CODE_CONFIGMAP, "items": items}},
        {"name": "local-ssd", "emptyDir": {}},
    ]


def _container(
    name: str, image: str, resources: dict[str, Any], ports: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    container = {
        "name": name,
        "image": image,
        # optional: a public model needs no token, and a pod must not hang on a missing Secret.
        "env": [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": HF_SECRET_KEY, "optional": True}},
            },
            # The tracking destinations' credentials, each optional: a run tracks where the deployment holds them.
            *(
                {"name": name, "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": name, "optional": True}}}
                for name in tracking.CREDENTIALS
            ),
            # The node the pod runs on (the downward API): what the trainer's GPU driver reading names.
            {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *({"name": k, "value": v} for k, v in CACHE_ENV.items()),
        ],
        "resources": resources,
        "volumeMounts": [
            {"name": "code", "mountPath": CODE_MOUNT},
            {"name": "local-ssd", "mountPath": SCRATCH},
        ],
    }
    if ports:
        container["ports"] = ports
    return container


def _worker_node_selector(cfg: RunConfig) -> dict[str, Any]:
    """The config's own selectors, then what its scaling fields decide, which win (an operator's fixed
    reservation and accelerator are those fields: functions/core/policy.py)."""
    scaling = cfg.scaling
    selector = dict(scaling.node_selector)
    if scaling.use_gpu:
        if scaling.capacity is None:  # a ComputeClass names the driver in its GPU rules
            selector["cloud.google.com/gke-gpu-driver-version"] = "latest"
        selector.update(LOCAL_SSD)
    selector.update(scaling.derived_selectors())
    selector.update(computeclass.selector(scaling, cfg.cluster.image_cache))
    if cfg.cluster.image_cache and not computeclass.renders(scaling):  # else its ComputeClass attaches the cache
        selector.update(image_cache.selector(cfg.cluster.image_cache))
    return selector


def _worker_resources(cfg: RunConfig) -> dict[str, Any]:
    amounts: dict[str, str] = {}
    if cfg.cluster.worker:
        worker = cfg.cluster.worker
        amounts = {"cpu": worker.cpu, "memory": worker.memory, "ephemeral-storage": worker.ephemeral_storage}
    if cfg.scaling.use_gpu:
        amounts["nvidia.com/gpu"] = str(cfg.scaling.gpus_per_node)
        amounts.setdefault("ephemeral-storage", cfg.cluster.worker_disk)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _start_resources(resources: dict[str, int]) -> str:
    """A rayStartParams `resources` value: JSON in single quotes, as KubeRay itself writes it (pod.go,
    addWellKnownAcceleratorResources) and as it reaches `ray start --resources=...` through the container's shell.
    Not the docs' '"{\\"Custom1\\": 1}"': KubeRay 1.5.2 cannot parse that back (json.Unmarshal after trimming
    quotes, backslashes left), logs an error on every reconcile and skips setting --num-gpus from the GPU limit.
    The group-level `resources` field is newer than KubeRay 1.3."""
    return f"'{json.dumps(resources)}'"


def worker_group(cfg: RunConfig, run_id: str, replicas: int, code_paths: list[str], code_hash: str) -> dict[str, Any]:
    """One run's worker group: its nodes, each advertising the run's own Ray resource (one unit per training
    worker it hosts), so Ray Train places the run's workers on its nodes only and the group can go with the run."""
    group = group_name(run_id)
    worker_spec: dict[str, Any] = {
        "containers": [_container("ray-worker", cfg.cluster.worker_image_ref, _worker_resources(cfg))],
        "volumes": _volumes(code_paths),
    }
    selector = _worker_node_selector(cfg)
    if selector:
        worker_spec["nodeSelector"] = selector
    if tolerations := computeclass.tolerations(cfg.scaling, cfg.cluster.image_cache):
        worker_spec["tolerations"] = tolerations
    return {
        "groupName": group,
        **_sized(replicas),
        "rayStartParams": {"resources": _start_resources({group: cfg.scaling.gpus_per_node or 1})},
        "template": {
            "metadata": {"labels": {RUN_LABEL: run_id}, "annotations": {CODE_HASH_ANNOTATION: code_hash}},
            "spec": worker_spec,
        },
    }


def resized(group: dict[str, Any], replicas: int) -> dict[str, Any]:
    """A worker group as read, at another size (and without a workersToDelete list KubeRay left behind)."""
    kept = {k: v for k, v in group.items() if k != "scaleStrategy"}
    return {**kept, **_sized(replicas)}


def _sized(replicas: int) -> dict[str, int]:
    """A group's size fields: replicas and minReplicas move together (KubeRay clamps replicas up to minReplicas,
    so scaling to zero needs both at 0); maxReplicas never below them, and at least 1."""
    return {"replicas": replicas, "minReplicas": replicas, "maxReplicas": max(replicas, 1)}


def ray_cluster(
    cfg: RunConfig,
    code_paths: list[str],
    code_hash: str,
    groups: list[dict[str, Any]],
    stamp: int = 0,
    owner: str | None = None,
) -> dict[str, Any]:
    """The shared RayCluster: the head, and one worker group per run holding nodes (`worker_group`). `stamp`
    is the allocation version the groups come from (functions/core/allocation.py): writers with an older one
    lose."""
    cluster = cfg.cluster
    head = cluster.head
    head_amounts = {"cpu": head.cpu, "memory": head.memory, "ephemeral-storage": head.ephemeral_storage}
    rendered: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": cluster.ray_cluster, "namespace": cluster.namespace, "labels": ownership(owner)},
        "spec": {
            "rayVersion": cluster.ray_version,
            "headGroupSpec": {
                # The head hosts a sweep's trial drivers (trainer/sweep.py): each asks for one of these.
                "rayStartParams": {
                    "dashboard-host": "0.0.0.0",
                    "resources": _start_resources({TRIAL_DRIVER_RESOURCE: TRIAL_DRIVERS}),
                },
                "template": {
                    "metadata": {"annotations": {CODE_HASH_ANNOTATION: code_hash}},
                    "spec": {
                        "containers": [
                            _container(
                                "ray-head",
                                cluster.head_image_ref,
                                {"requests": dict(head_amounts), "limits": dict(head_amounts)},
                                [{"containerPort": port, "name": name} for name, port in RAY_PORTS],
                            )
                        ],
                        "volumes": _volumes(code_paths),
                    },
                },
            },
        },
    }
    base = hashlib.sha256(json.dumps(rendered, sort_keys=True).encode()).hexdigest()
    rendered["metadata"]["annotations"] = {ALLOCATION_ANNOTATION: str(stamp), BASE_ANNOTATION: base}
    rendered["spec"]["workerGroupSpecs"] = groups
    return rendered


def group_ops(read: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON patch operations (RFC 6902) that turn the worker groups as read into `wanted`: the groups left out
    removed (last first, so each index is the read copy's, which the patch's resourceVersion pins), those that
    changed replaced, the new ones appended. A launch onto a RayCluster that holds 50 runs sends one group, not 50.
    When the groups kept are not first and in the order read, the whole list."""
    names = [group["groupName"] for group in read]
    keep = {group["groupName"] for group in wanted}
    kept = [name for name in names if name in keep]
    if not read or len(set(names)) != len(names) or [g["groupName"] for g in wanted[: len(kept)]] != kept:
        return [{"op": "add", "path": WORKER_GROUPS, "value": wanted}]
    ops: list[dict[str, Any]] = [
        {"op": "remove", "path": f"{WORKER_GROUPS}/{index}"}
        for index in reversed(range(len(read)))
        if names[index] not in keep
    ]
    left = [group for group in read if group["groupName"] in keep]
    ops += [
        {"op": "replace", "path": f"{WORKER_GROUPS}/{index}", "value": new}
        for index, (old, new) in enumerate(zip(left, wanted, strict=False))
        if old != new
    ]
    return ops + [{"op": "add", "path": f"{WORKER_GROUPS}/-", "value": new} for new in wanted[len(left) :]]


def entrypoint(cfg: RunConfig, run_id: str, python: str = "python", env: dict[str, str] | None = None) -> str:
    """The job command; every argument is shell-quoted (Ray runs entrypoints through a shell). `env`: variables
    for the driver alone, set on the command (the local platform's jobs have no runtime env)."""
    args = [
        *(["env", *(f"{name}={value}" for name, value in env.items())] if env else []),
        python,
        "-m",
        "trainer.train",
        "--run-id",
        run_id,
        "--config-json",
        cfg.model_dump_json(exclude_defaults=True),
    ]
    return shlex.join(args)


def runtime_env(cfg: RunConfig, code_hash: str, env: dict[str, str]) -> dict[str, Any]:
    runtime: dict[str, Any] = {
        "env_vars": {"PYTHONPATH": CODE_MOUNT.rstrip("/"), "RAYTUNE_CODE_SHA256": code_hash, **env},
    }
    if cfg.cluster.dependencies == "pip":
        wanted = cfg.tracking.pip if cfg.tracking else ()
        packages = list(dict.fromkeys([*cfg.cluster.pip, *wanted]))  # a tracked run's clients
        runtime["pip"] = {"packages": packages, "pip_check": False}
    return runtime


def ray_job(
    cfg: RunConfig, run_id: str, code_hash: str, env: dict[str, str], owner: str | None = None, job: str | None = None
) -> dict[str, Any]:
    """The RayJob of one attempt of a run (`job`: its name, the run id for the first), submitted to the shared
    cluster through clusterSelector (so KubeRay deletes nothing afterwards: the watcher scales the workers down).
    Every attempt trains as the run (Ray Train's run name), so a later one resumes from the run's checkpoints."""
    job = job or run_id
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": job,
            "namespace": cfg.cluster.namespace,
            "labels": {**cfg.labels, **ownership(owner), RUN_LABEL: run_id},  # ours win over the user's
            "annotations": {CODE_HASH_ANNOTATION: code_hash},
        },
        "spec": {
            "jobId": job,
            "entrypoint": entrypoint(cfg, run_id),
            "clusterSelector": {"ray.io/cluster": cfg.cluster.ray_cluster},
            "runtimeEnvYAML": yaml.safe_dump(
                runtime_env(cfg, code_hash, {WORKER_RESOURCE_ENV: group_name(run_id), **env}), sort_keys=True
            ),
            "activeDeadlineSeconds": cfg.deadlines.run_seconds,
        },
    }


@dataclass(frozen=True)
class RunObjects:
    """What a run's launch applies, by part, and the order it goes in: what the RayCluster's pods mount (the
    Secret, the code ConfigMap), the ComputeClass its group selects (GKE provisions by it) and the allowlist of
    the disk image its nodes boot with before the RayCluster, the RayJob last (once the cluster is sized)."""

    code: dict[str, Any]
    cluster: dict[str, Any]
    job: dict[str, Any]
    secret: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None
    image_cache: dict[str, Any] | None = None  # the GCPResourceAllowlist of the worker image's disk image

    def before_cluster(self) -> list[dict[str, Any]]:
        return [part for part in (self.secret, self.code, self.capacity, self.image_cache) if part is not None]

    def in_order(self) -> list[dict[str, Any]]:
        return [*self.before_cluster(), self.cluster, self.job]


def worker_groups(
    groups: dict[str, int], seen: Sequence[dict[str, Any]] = (), own: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The RayCluster's worker groups for `groups` (each group's replicas, in their order): the run's `own` as
    rendered, every other one as read (`seen`) at its new size."""
    read = {group["groupName"]: group for group in seen}
    return [
        own if own is not None and name == own["groupName"] else resized(read[name], replicas)
        for name, replicas in groups.items()
    ]


def assemble(
    cfg: RunConfig,
    run_id: str,
    files: dict[str, bytes],
    code_hash: str,
    *,
    groups: dict[str, int] | None = None,
    seen: Sequence[dict[str, Any]] = (),
    stamp: int = 0,
    owner: str | None = None,
    env: dict[str, str] | None = None,
    hf_token: str | None = None,
    credentials: dict[str, str] | None = None,
    job: str | None = None,
) -> RunObjects:
    """Every object of a run's launch: `groups` the RayCluster's groups and sizes (default: the run's own alone,
    at group_nodes), the others as `seen` on the cluster; `owner` the deployment (None: rendered for none);
    `hf_token` and `credentials` (the tracking destinations') both empty leave the Secret out (`raytune render`
    never prints it); `job` the attempt's RayJob name."""
    own_name = group_name(run_id)
    groups = {own_name: cfg.group_nodes} if groups is None else groups
    own = worker_group(cfg, run_id, groups.get(own_name, 0), list(files), code_hash)
    return RunObjects(
        code=code_configmap(cfg, files, code_hash),
        cluster=ray_cluster(cfg, list(files), code_hash, worker_groups(groups, seen, own), stamp, owner),
        job=ray_job(cfg, run_id, code_hash, env or {}, owner=owner, job=job),
        secret=secret(cfg, hf_token, credentials) if hf_token or credentials else None,
        capacity=computeclass.compute_class(cfg.scaling, ownership(owner), cfg.cluster.image_cache),
        image_cache=image_cache.allowlist(cfg.cluster.image_cache, ownership(owner))
        if cfg.cluster.image_cache
        else None,
    )


class _Dumper(yaml.SafeDumper):
    """Plain YAML for humans and kubectl: no anchors, multi-line strings (code, runtime env) as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=120)
