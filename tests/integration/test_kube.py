"""The Kubernetes adapter driven by the real `kubernetes` client against the HTTP fake."""

import pytest

from functions.adapters.kube import Kube, api_client
from functions.core import manifests
from functions.core.allocation import group_name
from functions.core.config import RunConfig

CFG = RunConfig(storage_path="gs://bucket/checkpoints")
CODE = {"trainer/__init__.py": b"", "trainer/train.py": b"x = 1\n"}


@pytest.fixture
def fake(kube_api):
    return kube_api  # tests/conftest.py's FakeKube, started for this test


@pytest.fixture
def kube(fake):
    return Kube(api_client(fake.url))


def objects(replicas=2):
    return manifests.assemble(CFG, "run-1", CODE, "h" * 64, groups={group_name("run-1"): replicas}).in_order()


def test_server_side_apply_creates_then_is_idempotent(fake, kube):
    for obj in [manifests.secret(CFG, "hf_secret_value_0123456789abcdef"), *objects()]:
        kube.apply(obj)
    assert fake.names("rayjobs") == ["run-1"] and fake.names("rayclusters") == ["gemma3-tuning"]
    assert fake.get("secrets", "hf-secret")["stringData"] == {"hf_api_token": "hf_secret_value_0123456789abcdef"}
    assert all(ct == "application/apply-patch+yaml" for m, _, ct in fake.requests if m == "PATCH")
    version = fake.get("rayclusters", "gemma3-tuning")["metadata"]["resourceVersion"]
    for obj in objects():
        kube.apply(obj)
    assert fake.get("rayclusters", "gemma3-tuning")["metadata"]["resourceVersion"] == version


def test_scale_is_conditional_on_the_groups_as_read(fake, kube):
    kube.apply(objects()[1])
    seen = kube.worker_groups("default", "gemma3-tuning")
    [group] = seen.groups
    assert group["replicas"] == 2
    kube.apply(objects(replicas=3)[1])  # somebody scaled up after we read
    assert kube.set_worker_groups("default", "gemma3-tuning", seen, [manifests.resized(group, 0)], 1) is False
    fresh = kube.worker_groups("default", "gemma3-tuning")
    assert kube.set_worker_groups("default", "gemma3-tuning", fresh, [manifests.resized(fresh.groups[0], 0)], 1)
    spec = fake.get("rayclusters", "gemma3-tuning")["spec"]["workerGroupSpecs"][0]
    assert (spec["replicas"], spec["minReplicas"]) == (0, 0)
    assert kube.set_worker_groups("default", "gemma3-tuning", kube.worker_groups("default", "gemma3-tuning"), [], 2)
    assert fake.get("rayclusters", "gemma3-tuning")["spec"]["workerGroupSpecs"] == []  # a drained group goes
    assert fake.calls("PATCH", "/rayclusters/") == 5


def test_transient_errors_are_retried(fake, kube):
    fake.fail("PATCH", "/rayjobs/run-1", 429, times=2)
    fake.fail("GET", "/rayjobs/run-1", 503, times=1)
    kube.apply(objects()[2])
    assert kube.get_rayjob("default", "run-1")["spec"]["jobId"] == "run-1"
    assert fake.calls("PATCH", "/rayjobs/run-1") == 3


def test_persistent_server_errors_and_bad_requests_raise(fake, kube):
    """Client exceptions leave the adapter as the controller's own errors, the ApiException as their cause."""
    from kubernetes.client.exceptions import ApiException

    from functions.core.errors import PermanentError, TransientError

    fake.fail("PATCH", "/rayjobs/", 500, times=4)
    with pytest.raises(TransientError) as err:
        kube.apply(objects()[2])
    assert err.value.status == 500 and fake.calls("PATCH", "/rayjobs/") == 4
    assert isinstance(err.value.__cause__, ApiException)
    job = objects()[2]
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteCluster"}}  # feature-gated: off on GKE
    calls = fake.calls("PATCH", "/rayjobs/")
    with pytest.raises(PermanentError) as err:  # a 500, as the real server answers, but never retried
        kube.apply(job)
    assert err.value.status == 500 and fake.calls("PATCH", "/rayjobs/") == calls + 1
    assert str(err.value).startswith("the cluster's KubeRay does not know .spec.deletionStrategy (default/")
    assert "field not declared in schema" in str(err.value)


def test_missing_objects(kube):
    assert kube.get_rayjob("default", "nope") is None
    assert kube.worker_groups("default", "nope") is None
    kube.delete_rayjob("default", "nope")  # already gone is fine


def test_bearer_token_is_asked_for_on_every_request(fake):
    tokens = iter(["t0", "t1", "t2", "t3"])
    kube = Kube(api_client(fake.url, token=lambda: next(tokens)))
    kube.get_rayjob("default", "a")
    kube.get_rayjob("default", "b")
    assert fake.authorization == ["Bearer t1", "Bearer t2"]  # t0 seeded the client; each call refreshed


def test_a_rayclusters_readiness_outlives_a_metadata_listing_and_a_new_one_is_read_until_ready(fake, kube):
    """A metadata listing carries no status: a RayCluster KubeRay called ready stays ready in every later listing
    (the readiness hold must never take a used RayCluster for a new one), and one not yet ready is read by name at
    each listing until it is."""
    from functions.adapters.kube import RayClusterSeen

    labels = manifests.ownership(None)
    assert kube.create(
        manifests.ray_cluster(CFG, [], "h" * 64, [manifests.worker_group(CFG, "run-1", 1, [], "h" * 64)])
    )
    name = CFG.cluster.ray_cluster

    def listed() -> tuple[bool, int]:
        before = sum(1 for m, p, _ in fake.requests if m == "GET" and p.endswith(f"/rayclusters/{name}"))
        [found] = kube.ray_clusters("default", labels)
        reads = sum(1 for m, p, _ in fake.requests if m == "GET" and p.endswith(f"/rayclusters/{name}")) - before
        return RayClusterSeen.of(found).ready, reads

    assert listed() == (False, 0)  # a fresh client lists the namespace whole
    assert listed() == (False, 1)  # not ready yet: its status is read with it
    fake.set_status("rayclusters", name, {"state": "ready"})
    assert listed() == (True, 1)
    assert listed() == (True, 0) and listed() == (True, 0)  # from the metadata listing, still ready


def test_many_changed_rayclusters_are_listed_again_whole_not_read_one_by_one(fake, kube):
    """Past CHANGED_READS_MAX changed RayClusters in a namespace, one whole listing costs less than a read each;
    one deleted since is gone from the answer and from what the client remembers."""
    from functions.adapters.cluster_specs import CHANGED_READS_MAX

    labels = manifests.ownership(None)
    names = [f"pool-{i}" for i in range(CHANGED_READS_MAX + 2)]
    for name in names:
        cfg = CFG.model_copy(update={"cluster": CFG.cluster.model_copy(update={"ray_cluster": name})})
        assert kube.create(
            manifests.ray_cluster(cfg, [], "h" * 64, [manifests.worker_group(cfg, "run-1", 1, [], "h" * 64)])
        )
        fake.set_status("rayclusters", name, {"state": "ready"})  # KubeRay's, once its pods ran
    assert sorted(c["metadata"]["name"] for c in kube.ray_clusters("default", labels)) == names

    def calls() -> tuple[int, int, int]:
        listings = [a for m, p, a in fake.requests if m == "GET" and p.endswith("/rayclusters")]
        by_name = sum(1 for m, p, _ in fake.requests if m == "GET" and "/rayclusters/" in p)
        return sum("PartialObjectMetadataList" in a for a in listings), len(listings), by_name

    for name in names:  # every spec changes (a groups write moves the generation)
        seen = kube.worker_groups("default", name)
        assert kube.set_worker_groups("default", name, seen, [manifests.resized(seen.groups[0], 2)], 1)
    fake.remove("rayclusters", names[0])
    before = calls()
    found = kube.ray_clusters("default", labels)
    metadata, listings, by_name = (now - then for now, then in zip(calls(), before, strict=True))
    assert (metadata, listings, by_name) == (1, 2, 0)  # its metadata, then the namespace whole
    assert sorted(c["metadata"]["name"] for c in found) == names[1:]
    assert all(c["spec"]["workerGroupSpecs"][0]["replicas"] == 2 for c in found)
    before = calls()
    kube.ray_clusters("default", labels)
    assert tuple(now - then for now, then in zip(calls(), before, strict=True)) == (1, 1, 0)  # unchanged: metadata
