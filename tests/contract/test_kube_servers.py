"""Where tests/fakes/kube.py and the real kube-apiserver 1.36 with KubeRay 1.5.2's CRDs could differ, held on
both: every test here runs against the fake and against the real control plane (tests/realkube/; skipped with
one line without it), through the same adapter (functions/adapters/kube.py)."""

from __future__ import annotations

import time
import uuid

import pytest

from functions.adapters.kube import RayClusterSeen
from functions.core import errors, manifests
from functions.core.config import RunConfig

CFG = RunConfig.model_validate({"name": "servers", "scaling": {"nodes": 1}, "storage_path": "gs://bucket-a/c"})


@pytest.fixture(params=["fake", "real"])
def server(request):
    """(Kube adapter, namespace that exists) on the fake or on the real API server."""
    from functions.adapters.kube import Kube, api_client

    if request.param == "fake":
        from tests.fakes.kube import FakeKube

        fake = FakeKube().start()
        yield Kube(api_client(fake.url)), "default", fake
        fake.stop()
    else:
        plane = request.getfixturevalue("control_plane")
        namespace = f"rk-{uuid.uuid4().hex[:8]}"
        plane.kubectl("create", "namespace", namespace)
        yield plane.kube(), namespace, None
        plane.kubectl("delete", "namespace", namespace, "--wait=false")


def in_namespace(cfg: RunConfig, namespace: str) -> RunConfig:
    return cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"namespace": namespace})})


def test_an_undeclared_field_is_a_500_the_adapter_makes_permanent(server):
    kube, namespace, _ = server
    job = manifests.ray_job(in_namespace(CFG, namespace), "field-1", "h" * 64, {})
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteCluster"}}  # feature-gated: off on GKE
    job["spec"]["notAFieldAnywhere"] = 1
    with pytest.raises(errors.PermanentError) as err:
        kube.apply(job)
    assert err.value.status == 500 and "field not declared in schema" in str(err.value)
    assert str(err.value).startswith("the cluster's KubeRay does not know .spec.")


def test_a_write_into_a_missing_namespace_is_a_404_naming_it(server):
    kube, _, _ = server
    missing = f"nope-{uuid.uuid4().hex[:6]}"
    with pytest.raises(errors.NotFound) as err:
        kube.apply(manifests.code_configmap(in_namespace(CFG, missing), {"trainer/x.py": b""}, "h" * 64))
    assert f'namespaces "{missing}" not found' in str(err.value)


def set_groups(kube, namespace: str, groups_of, stamp: int) -> None:
    """Set the worker groups as the controller does: a write conditional on the copy just read, and on a
    lost race (the real KubeRay operator updates a new RayCluster's status, which moves its resourceVersion)
    a new read and another write."""
    for _ in range(10):
        seen = kube.worker_groups(namespace, CFG.cluster.ray_cluster)
        if kube.set_worker_groups(namespace, CFG.cluster.ray_cluster, seen, groups_of(seen), stamp):
            return
    raise AssertionError("the RayCluster changed under ten writes in a row")


def test_the_crd_accepts_negative_replicas_so_the_adapter_refuses_them(server):
    kube, namespace, _ = server
    cfg = in_namespace(CFG, namespace)
    cluster = manifests.ray_cluster(cfg, [], "h" * 64, [manifests.worker_group(cfg, "run-1", 1, [], "h" * 64)])
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = -1
    assert kube.create(cluster)  # the server takes it: nothing stops a buggy writer but us
    seen = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    [group] = seen.groups
    assert group["replicas"] == -1
    with pytest.raises(ValueError, match="at least 0"):
        kube.set_worker_groups(namespace, cfg.cluster.ray_cluster, seen, [manifests.resized(group, -1)], 1)
    set_groups(kube, namespace, lambda seen: [manifests.resized(seen.groups[0], 0)], 1)
    assert kube.worker_groups(namespace, cfg.cluster.ray_cluster).groups[0]["replicas"] == 0
    # A drained group leaves the spec; the CRD takes an empty list (a RayCluster with its head only).
    set_groups(kube, namespace, lambda seen: [], 2)
    assert kube.worker_groups(namespace, cfg.cluster.ray_cluster).groups == []


def test_only_the_groups_that_change_are_sent_and_the_list_ends_as_wanted(server):
    """A launch onto a RayCluster of many runs, and a scale-down, patch the groups that change (removed, replaced,
    appended), at the indexes of the copy read; the list ends as the whole-list write would have left it."""
    kube, namespace, _ = server
    cfg = in_namespace(CFG, namespace)
    a, b, c = (manifests.worker_group(cfg, f"run-{n}", n, [], "h" * 64) for n in (1, 2, 3))
    assert kube.create(manifests.ray_cluster(cfg, [], "h" * 64, [a, b, c]))
    d = manifests.worker_group(cfg, "run-4", 1, [], "h" * 64)
    before = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    set_groups(kube, namespace, lambda seen: [seen.groups[0], manifests.resized(seen.groups[2], 0), d], 1)
    after = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    assert [(g["groupName"], g["replicas"]) for g in after.groups] == [
        (a["groupName"], 1),
        (c["groupName"], 0),
        (d["groupName"], 1),
    ]
    assert after.stamp == 1
    # A copy read before that write: its indexes are stale, and what it is conditional on refuses it whole.
    assert not kube.set_worker_groups(namespace, cfg.cluster.ray_cluster, before, [d], 2)
    assert [g["groupName"] for g in kube.worker_groups(namespace, cfg.cluster.ray_cluster).groups] == [
        a["groupName"],
        c["groupName"],
        d["groupName"],
    ]


def test_a_patched_group_with_a_field_kuberay_does_not_know_is_refused(server):
    """The groups' patch is checked as strictly as an apply: a field the cluster's KubeRay does not know fails
    the write, never dropped in silence."""
    kube, namespace, _ = server
    cfg = in_namespace(CFG, namespace)
    assert kube.create(
        manifests.ray_cluster(cfg, [], "h" * 64, [manifests.worker_group(cfg, "run-1", 1, [], "h" * 64)])
    )
    odd = {**manifests.worker_group(cfg, "run-2", 1, [], "h" * 64), "notAFieldAnywhere": 1}
    with pytest.raises(errors.PermanentError) as err:
        set_groups(kube, namespace, lambda seen: [*seen.groups, odd], 1)
    assert err.value.status == 422  # the message quotes the whole object, then names the field: kept short
    assert str(err.value).startswith("the cluster's KubeRay does not know .spec.workerGroupSpecs[1].notAFieldAnywhere:")
    assert str(err.value).endswith('strict decoding error: unknown field "spec.workerGroupSpecs[1].notAFieldAnywhere"')
    assert len(kube.worker_groups(namespace, cfg.cluster.ray_cluster).groups) == 1


def test_kuberays_status_writes_do_not_refuse_a_groups_write_a_stale_copy_is_refused(server):
    """KubeRay writes a RayCluster's status two or three times after each change of its spec, which moves the
    resourceVersion (10 launches at once lost 4-7 writes to it). A groups' write is conditional on the stamp and
    the groups as read, which only the controller's writes change: a status write between read and write lets
    it land; a groups' write of another writer in between refuses it."""
    kube, namespace, fake = server
    cfg = in_namespace(CFG, namespace)
    a = manifests.worker_group(cfg, "run-1", 1, [], "h" * 64)
    assert kube.create(manifests.ray_cluster(cfg, [], "h" * 64, [a], 1))
    seen = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    assert seen.stamped and seen.stamp == 1
    status = {"status": {"state": "ready", "desiredWorkerReplicas": 1, "lastUpdateTime": "2026-12-05T06:00:00Z"}}
    if fake is None:
        from kubernetes import client

        client.CustomObjectsApi(kube.custom.api_client).patch_namespaced_custom_object_status(
            "ray.io", "v1", namespace, "rayclusters", cfg.cluster.ray_cluster, status
        )
    else:
        fake.set_status("rayclusters", cfg.cluster.ray_cluster, status["status"], namespace)
    moved = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    assert moved.resource_version != seen.resource_version  # the status write moved it
    b = manifests.worker_group(cfg, "run-2", 2, [], "h" * 64)
    assert kube.set_worker_groups(namespace, cfg.cluster.ray_cluster, seen, [a, b], 2)
    # Another writer's groups' write after that read: the copy is stale and the write refused whole.
    stale = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    set_groups(kube, namespace, lambda now: [now.groups[0]], 3)
    assert not kube.set_worker_groups(namespace, cfg.cluster.ray_cluster, stale, [a, b, manifests.resized(b, 5)], 4)
    after = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    assert [(g["groupName"], g["replicas"]) for g in after.groups] == [(a["groupName"], 1)] and after.stamp == 3


def test_a_groups_write_that_adopts_a_raycluster_labels_it_in_the_same_conditional_patch(server):
    """A RayCluster made before deployments were labelled (managed-by only) is labelled as this deployment's by
    the tick's groups write that adopts it (allocation.adoptable); its other labels stay."""
    kube, namespace, _ = server
    cfg = in_namespace(CFG, namespace)
    cluster = manifests.ray_cluster(cfg, [], "h" * 64, [manifests.worker_group(cfg, "run-1", 1, [], "h" * 64)])
    assert manifests.OWNER_LABEL not in cluster["metadata"]["labels"]  # rendered for no deployment
    assert kube.create(cluster)
    for _ in range(10):  # the real KubeRay's status writes move an unstamped RayCluster's resourceVersion
        seen = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
        assert seen.managed and seen.owner is None
        if kube.set_worker_groups(namespace, cfg.cluster.ray_cluster, seen, seen.groups, 1, label="bucket-a"):
            break
    after = kube.worker_groups(namespace, cfg.cluster.ray_cluster)
    assert (after.owner, after.managed, after.stamp) == ("bucket-a", True, 1)


def write_status(kube, namespace: str, name: str, status: dict, fake) -> None:
    """A status write as KubeRay makes it: through the status subresource (the fake: its own helper)."""
    if fake is None:
        from kubernetes import client

        client.CustomObjectsApi(kube.custom.api_client).patch_namespaced_custom_object_status(
            "ray.io", "v1", namespace, "rayclusters", name, {"status": status}
        )
    else:
        fake.set_status("rayclusters", name, status, namespace)


def test_a_raycluster_listed_again_is_sent_whole_only_when_its_spec_changed(server, monkeypatch):
    """The tick's RayCluster listing (functions/adapters/cluster_specs.py) keeps a spec it read while the API
    server shows the same uid and metadata.generation (and KubeRay has called it ready: until then its status is
    read with it): it relies on the generation moving on every spec change and never on a status write, held
    here on both servers. A status write moves the resourceVersion alone, and
    the listing carries the new one, so a write conditional on it lands; a groups write moves the generation,
    and the next listing reads that RayCluster again; one deleted and made again under its name is read too."""
    kube, namespace, fake = server
    cfg = in_namespace(CFG, namespace)
    name, labels = cfg.cluster.ray_cluster, manifests.ownership(None)
    reads: list[str] = []
    read = kube.raycluster
    monkeypatch.setattr(kube, "raycluster", lambda ns, n: reads.append(n) or read(ns, n))
    a = manifests.worker_group(cfg, "run-1", 1, [], "h" * 64)
    assert kube.create(manifests.ray_cluster(cfg, [], "h" * 64, [a], 1))
    [first] = kube.ray_clusters(namespace, labels)  # never listed: listed whole
    write_status(kube, namespace, name, {"state": "ready", "desiredWorkerReplicas": 1}, fake)
    [ready] = kube.ray_clusters(namespace, labels)  # not yet seen ready: read again, with its status
    assert reads == [name] and RayClusterSeen.of(ready).ready
    reads.clear()
    write_status(kube, namespace, name, {"desiredWorkerReplicas": 2}, fake)
    [again] = kube.ray_clusters(namespace, labels)
    # its metadata alone was listed; of its status, the readiness kept (KubeRay never takes it back)
    assert reads == [] and again["status"] == {"state": "ready"} and RayClusterSeen.of(again).ready
    assert again["metadata"]["generation"] == first["metadata"]["generation"]
    assert again["metadata"]["resourceVersion"] != ready["metadata"]["resourceVersion"]
    assert again["spec"] == first["spec"]
    seen = RayClusterSeen.of(again)
    b = manifests.worker_group(cfg, "run-2", 2, [], "h" * 64)
    assert kube.set_worker_groups(namespace, name, seen, [a, b], 2)  # conditional on the listing's version
    [changed] = kube.ray_clusters(namespace, labels)
    assert reads == [name] and changed["metadata"]["generation"] > again["metadata"]["generation"]
    assert [g["groupName"] for g in changed["spec"]["workerGroupSpecs"]] == [a["groupName"], b["groupName"]]
    # Deleted and made again under the same name (generation 1 again): another uid, read again.
    for _ in range(10):  # the real KubeRay may write its status between the read and the delete
        current = kube.raycluster(namespace, name)
        if current is None or kube.delete_raycluster(namespace, name, current["metadata"]["resourceVersion"]):
            break
    deadline = time.monotonic() + 30
    while kube.raycluster(namespace, name) is not None:
        assert time.monotonic() < deadline, "the RayCluster was not deleted"
        time.sleep(0.2)
    assert kube.create(manifests.ray_cluster(cfg, [], "h" * 64, [b], 1))
    reads.clear()
    [remade] = kube.ray_clusters(namespace, labels)
    assert reads == [name] and [g["groupName"] for g in remade["spec"]["workerGroupSpecs"]] == [b["groupName"]]
