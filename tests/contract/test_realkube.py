"""The controller against a real kube-apiserver 1.36 and the real KubeRay 1.5.2 operator (tests/realkube/):
the same scenarios as the integration tests that touch Kubernetes, through the real launch and watch handlers
over HTTP. Pods are played by kubelet.py and Ray heads by fake_dashboard.py; jobs end only through the
dashboard player's control API, so what the operator does in between is the operator's own doing."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import time
import uuid
from contextlib import contextmanager

import pytest

from functions.core.policy import Policy
from functions.core.runs import State
from tests.fakes.http_events import post, pubsub_event, storage_event

RAYCLUSTER = "gemma3-tuning"
HEAD_SERVICE = f"{RAYCLUSTER}-head-svc"


def eventually(condition, what: str, timeout_s: float = 60, every_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(every_s)
    raise AssertionError(f"not {what} after {timeout_s}s")


class Real:
    """One test's view: its own namespace on the shared control plane, the controller over HTTP."""

    def __init__(self, plane, harness, servers, bucket, namespace):
        from kubernetes import client

        self.plane, self.h, self.servers, self.bucket, self.namespace = plane, harness, servers, bucket, namespace
        api = plane.client()
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def config(self, name: str, nodes: int = 1, **sections) -> dict:
        cluster = {"namespace": self.namespace, **sections.pop("cluster", {})}
        return {"name": name, "scaling": {"nodes": nodes}, "cluster": cluster, **sections}

    def launch(self, name: str, body: dict) -> str:
        from functions.adapters.gcs import storage_client

        blob = storage_client().bucket(self.bucket).blob(f"configs/{name}.json")
        blob.upload_from_string(json.dumps(body))
        event = storage_event(self.bucket, f"configs/{name}.json", blob.generation)
        assert post(self.servers["launch"], event).status_code == 200
        ref = f"gs://{self.bucket}/configs/{name}.json#{blob.generation}"
        names = [n.removeprefix("runs/").removesuffix(".json") for n in self.h.ctx.store.blobs.list("runs/")]
        found = [r for r in map(self.h.ctx.store.get, names) if r is not None and r.source.get("ref") == ref]
        return found[0].run_id

    def tick(self, body: dict | None = None) -> None:
        assert post(self.servers["watch"], pubsub_event(body or {"kind": "tick"})).status_code == 200

    def state(self, run_id: str) -> State:
        return self.h.ctx.store.get(run_id).state

    def until_state(self, run_id: str, *states: State, timeout_s: float = 90) -> State:
        """Ticks until the run is in one of `states` (the operator moves on its own time)."""

        def reached():
            self.tick()
            return self.state(run_id) in states

        eventually(reached, f"{run_id} in {[s.value for s in states]} (is {self.state(run_id).value})", timeout_s, 0.5)
        return self.state(run_id)

    def raycluster(self) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object("ray.io", "v1", self.namespace, "rayclusters", RAYCLUSTER)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def replicas(self) -> int:
        cluster = self.raycluster()
        return sum(g["replicas"] for g in cluster["spec"]["workerGroupSpecs"]) if cluster else 0

    def rayjobs(self) -> list[str]:
        found = self.custom.list_namespaced_custom_object("ray.io", "v1", self.namespace, "rayjobs")["items"]
        return sorted(j["metadata"]["name"] for j in found)

    def pods(self, selector: str = "") -> list:
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def submitted(self, run_id: str) -> str:
        """The job's submission id once KubeRay's submitter reached the head's dashboard; the watcher ticks every
        few seconds meanwhile, as its schedule has it deployed (it may have to ask KubeRay again: kuberay_lag.py)."""
        ticked = [time.monotonic()]

        def found():
            jobs = self.plane.jobs().get(f"{self.namespace}/{HEAD_SERVICE}", {})
            sid = next((sid for sid in jobs if sid.startswith(run_id)), None)
            if sid is None and time.monotonic() - ticked[0] >= 5:
                self.tick()
                ticked[0] = time.monotonic()
            return sid

        try:
            return eventually(found, f"{run_id} submitted to the dashboard", 90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.where_the_job_is(run_id)}") from None

    def where_the_job_is(self, run_id: str) -> str:
        """What the operator and the node player made of a run's job: what a CI log needs when it never starts."""
        found = self.custom.list_namespaced_custom_object("ray.io", "v1", self.namespace, "rayjobs")["items"]
        said = ("jobDeploymentStatus", "jobStatus", "reason", "message")
        jobs = {
            job["metadata"]["name"]: {k: v for k, v in (job.get("status") or {}).items() if k in said}
            for job in found
            if job["metadata"]["name"].startswith(run_id)
        }
        cluster = (self.raycluster() or {}).get("status") or {}
        pods = [
            f"{p.metadata.name} {p.status.phase}" + (f" ({p.status.message})" if p.status.message else "")
            for p in self.pods()
            if p.metadata.name.startswith(run_id)
        ]
        return f"RayJobs {jobs}, RayCluster state {cluster.get('state')!r}, its submitter's pods {pods}"

    def end_job(self, run_id: str, status: str, message: str = "") -> None:
        self.plane.set_job(self.namespace, HEAD_SERVICE, self.submitted(run_id), status, message)

    def succeed(self, run_ids) -> None:
        """Each run's job ends SUCCEEDED with a result, and each run gets there."""
        for run_id in run_ids:
            self.write_result(run_id)
            self.end_job(run_id, "SUCCEEDED")
        for run_id in run_ids:
            assert self.until_state(run_id, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED

    def write_result(self, run_id: str) -> None:
        from functions.adapters.gcs import storage_client

        record = self.h.ctx.store.get(run_id)
        bucket, _, prefix = record.config["storage_path"].removeprefix("gs://").partition("/")
        result = {"metrics": {"train_loss": 1.0}, "final_checkpoint": f"gs://{bucket}/{prefix}/{run_id}/c/checkpoint"}
        storage_client().bucket(bucket).blob(f"{prefix}/{run_id}/result.json").upload_from_string(json.dumps(result))


@pytest.fixture
def real(control_plane, bucket, pubsub, request):
    from functions.handlers import context
    from tests.harness import build_controller, serve_functions

    namespace = f"rk-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", namespace)
    harness = build_controller(
        bucket,
        pubsub,
        lambda cluster: control_plane.kube(),
        policy=Policy(namespaces=("rk-*",)),
    )
    try:
        with serve_functions() as urls:
            yield Real(control_plane, harness, urls, bucket, namespace)
    finally:
        context.use(None)
        if getattr(request.node, "failed_call", False):
            print(control_plane.told(namespace))
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def running_workers(real, count: int) -> None:
    eventually(
        lambda: len([p for p in real.pods("ray.io/node-type=worker") if p.status.phase == "Running"]) == count,
        f"{count} workers running",
        90,
    )


def test_launch_to_succeeded_with_scale_down(real):
    run_id = real.launch("ok", real.config("ok", nodes=2))
    assert real.state(run_id) == State.SUBMITTED and real.rayjobs() == [run_id]
    assert real.replicas() == 2
    # The operator makes the head and two workers; the node player schedules and runs them.
    running_workers(real, 2)
    real.end_job(run_id, "RUNNING")
    assert real.until_state(run_id, State.RUNNING) == State.RUNNING
    real.write_result(run_id)
    real.end_job(run_id, "SUCCEEDED")
    assert real.until_state(run_id, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED
    record = real.h.ctx.store.get(run_id)
    assert record.settled and record.result.metrics.train_loss == 1.0
    assert real.replicas() == 0
    eventually(lambda: not real.pods("ray.io/node-type=worker"), "the workers gone", 60)


def ray_start(pod) -> dict[str, str]:
    """The `ray start` flags KubeRay generated for a pod, as its container's shell passes them on."""
    [container] = pod.spec.containers
    script = " ".join([*(container.command or []), *(container.args or [])])
    words = shlex.split(script[script.index("ray start") :].split(";")[0])
    return dict(w.removeprefix("--").partition("=")[::2] for w in words if w.startswith("--"))


def test_kuberay_reads_the_resources_each_group_advertises_and_adds_the_gpus(real):
    """The operator parses rayStartParams' `resources` (to add accelerators to it): in the format it writes itself
    it can, so the workers' `ray start` also gets --num-gpus from the GPU limit, and the shell passes ray JSON. The
    docs' '"{\\"x\\": 1}"' it could not: an error logged on every reconcile and no --num-gpus (KubeRay 1.5.2)."""
    from functions.core.allocation import group_name

    run_id = real.launch("started", real.config("started"))
    running_workers(real, 1)
    [head], [worker] = real.pods("ray.io/node-type=head"), real.pods("ray.io/node-type=worker")
    assert json.loads(ray_start(head)["resources"]) == {"raytune-trial-driver": 64}
    started = ray_start(worker)
    assert json.loads(started["resources"]) == {group_name(run_id): 8}
    assert started["num-gpus"] == "8"
    assert not [
        line for line in real.plane.logged("kuberay-operator", real.namespace) if "accelerator resources" in line
    ]
    real.succeed([run_id])


def test_cancel_while_running_stops_the_job_and_releases_the_workers(real):
    run_id = real.launch("cancel", real.config("cancel"))
    running_workers(real, 1)
    real.end_job(run_id, "RUNNING")
    real.until_state(run_id, State.RUNNING)
    real.tick({"kind": "cancel", "run_id": run_id})
    assert real.state(run_id) == State.CANCELLED
    # KubeRay calls the dashboard's stop and removes its finalizer: the RayJob goes for good.
    eventually(lambda: real.rayjobs() == [], "the RayJob deleted", 60)
    jobs = real.plane.jobs()[f"{real.namespace}/{HEAD_SERVICE}"]
    assert jobs[real.submitted(run_id)]["status"] == "STOPPED"
    assert real.replicas() == 0


def test_two_concurrent_launches_size_one_raycluster_for_both(real):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        ids = list(pool.map(lambda a: real.launch(a[0], real.config(a[0], nodes=a[1])), [("a", 2), ("b", 1)]))
    assert {real.state(i) for i in ids} == {State.SUBMITTED}
    assert real.replicas() == 3 and real.rayjobs() == sorted(ids)
    running_workers(real, 3)
    real.succeed(ids)
    assert real.replicas() == 0


def test_a_queued_run_is_admitted_when_the_run_ahead_ends(real):
    cap = {"max_worker_nodes": 2}
    first = real.launch("first", real.config("first", nodes=2, cluster=cap))
    second = real.launch("second", real.config("second", nodes=1, cluster=cap))
    assert real.state(first) == State.SUBMITTED and real.state(second) == State.QUEUED
    assert real.rayjobs() == [first] and real.replicas() == 2
    running_workers(real, 2)
    real.write_result(first)
    real.end_job(first, "SUCCEEDED")
    real.until_state(first, State.SUCCEEDED)
    assert real.state(second) == State.SUBMITTED and second in real.rayjobs()
    assert real.replicas() == 1  # the first run's group went to zero; the second has its own
    real.submitted(second)  # the admitted run's job reached the head


@pytest.mark.parametrize("ending", ["small", "big"])
def test_an_ended_run_releases_exactly_its_own_pods_on_the_real_operator(real, ending):
    """Issue 21: with one shared group, a 1-node run kept a 5-node group until every run ended. Each run has its
    own group now: the real KubeRay deletes exactly the ended run's pods, the other run's pods stay (same names),
    and the drained group leaves the spec; whichever ends first (the large one beside a small live one is the
    case exact release exists for)."""
    from functions.core.allocation import group_name

    runs = {"big": real.launch("big", real.config("big", nodes=2)), "small": real.launch("small", real.config("small"))}
    running_workers(real, 3)

    def pods_of(run_id):
        return sorted(p.metadata.name for p in real.pods(f"ray.io/group={group_name(run_id)}"))

    ended, live = runs[ending], runs["small" if ending == "big" else "big"]
    kept = pods_of(live)
    assert len(pods_of(runs["big"])) == 2 and len(pods_of(runs["small"])) == 1
    real.write_result(ended)
    real.end_job(ended, "SUCCEEDED")
    real.until_state(ended, State.SUCCEEDED)
    eventually(lambda: not pods_of(ended), f"the {ending} run's pods deleted by KubeRay", 60)
    assert pods_of(live) == kept, "not one of the live run's pods was touched"
    real.tick()
    groups = [g["groupName"] for g in real.raycluster()["spec"]["workerGroupSpecs"]]
    assert groups == [group_name(live)] and real.replicas() == len(kept)
    assert real.state(live) == State.SUBMITTED


def test_stuck_workers_fail_at_the_deadline_with_the_schedulers_reason(real):
    from tests.realkube.session import NO_CAPACITY

    run_id = real.launch(
        "stuck",
        real.config("stuck", scaling={"nodes": 1, "reservation": "a4-sold-out"}, deadlines={"pending_seconds": 300}),
    )
    eventually(
        lambda: any(e.reason == "FailedScheduling" for e in real.core.list_namespaced_event(real.namespace).items),
        "a FailedScheduling event",
        60,
    )
    real.tick()
    assert "FailedScheduling" in (real.h.ctx.store.get(run_id).reason or "")
    assert NO_CAPACITY in real.pods("ray.io/node-type=worker")[0].spec.node_selector
    real.h.clock.advance(301)
    assert real.until_state(run_id, State.FAILED) == State.FAILED
    reason = real.h.ctx.store.get(run_id).reason
    assert "FailedScheduling" in reason and "didn't match Pod's node affinity/selector" in reason, reason
    assert real.replicas() == 0


def test_leaked_objects_are_swept_on_the_real_server(real):
    """Ours (this deployment's label) swept; another deployment's in the same namespace left alone, selected out
    by the real server's label selector. The grace is the deployment's default (600 s): the controller's clock is
    moved past it (the API server stamps the objects with real time); within it, nothing is swept."""
    import datetime as dt

    from functions.core import manifests
    from functions.core.config import RunConfig

    grace = real.h.ctx.settings.sweep_grace_s
    assert grace == 600  # the default, not shortened
    live = real.launch("live", real.config("live"))
    cfg = RunConfig.model_validate(real.h.ctx.store.get(live).config)
    create = real.custom.create_namespaced_custom_object
    theirs = manifests.owner_id("another-deployments-bucket")
    for owner, prefix in ((real.h.ctx.platform.owner, "ghost"), (theirs, "theirs")):
        create(
            "ray.io",
            "v1",
            real.namespace,
            "rayjobs",
            manifests.ray_job(cfg, f"{prefix}-0123456789", "h" * 64, {}, owner),
        )
        other = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"ray_cluster": f"{prefix}-cluster"})})
        create(
            "ray.io",
            "v1",
            real.namespace,
            "rayclusters",
            manifests.ray_cluster(
                other,
                [],
                "h" * 64,
                [manifests.worker_group(other, f"{prefix}-0123456789", 1, [], "h" * 64)],
                owner=owner,
            ),
        )
    real.h.clock.now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace - 30)  # within the grace
    real.tick()
    assert "ghost-0123456789" in real.rayjobs() and real.h.events_of("leak") == []
    real.h.clock.now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace + 5)  # past it
    real.tick()
    eventually(lambda: sorted(real.rayjobs()) == sorted([live, "theirs-0123456789"]), "the ghost RayJob gone", 60)
    names = {
        c["metadata"]["name"]
        for c in real.custom.list_namespaced_custom_object("ray.io", "v1", real.namespace, "rayclusters")["items"]
    }
    assert names == {RAYCLUSTER, "theirs-cluster"}
    leaks = {e["reason"].split(":")[0] for e in real.h.events_of("leak")}
    assert leaks == {
        f"RayJob {real.namespace}/ghost-0123456789 stopped",
        f"RayCluster {real.namespace}/ghost-cluster deleted",
    }


def test_an_idle_teardown_loses_to_a_launch_and_later_deletes_the_cluster(real):
    idle = {"idle_delete_seconds": 60}
    first = real.launch("idle", real.config("idle", cluster=idle))
    running_workers(real, 1)
    real.write_result(first)
    real.end_job(first, "SUCCEEDED")
    real.until_state(first, State.SUCCEEDED)
    real.h.clock.advance(61)
    delete = real.h.ctx.platform.delete_cluster
    landed = {}

    def launch_then_delete(spec, workers):
        landed.setdefault("run", real.launch("sneaks-in", real.config("sneaks-in", cluster=idle)))
        return delete(spec, workers)

    real.h.ctx.platform.delete_cluster = launch_then_delete
    real.tick()
    real.h.ctx.platform.delete_cluster = delete
    assert real.state(landed["run"]) == State.SUBMITTED and real.raycluster() is not None and real.replicas() == 1
    real.write_result(landed["run"])
    real.end_job(landed["run"], "SUCCEEDED")
    real.until_state(landed["run"], State.SUCCEEDED)
    real.h.clock.advance(61)
    real.tick()
    eventually(lambda: real.raycluster() is None, "the idle RayCluster deleted", 60)
    eventually(lambda: not real.pods(), "its pods removed by the garbage collector", 60)


@contextmanager
def older_rayjob_crd(plane):
    """What a cluster whose Ray operator add-on runs an older KubeRay serves: a RayJob CRD without a field we
    render (activeDeadlineSeconds removed from the installed schema), put back afterwards."""
    path = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/activeDeadlineSeconds"
    crd = json.loads(plane.kubectl("get", "crd", "rayjobs.ray.io", "-o", "json"))
    kept = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "activeDeadlineSeconds"
    ]
    plane.kubectl("patch", "crd", "rayjobs.ray.io", "--type=json", "-p", json.dumps([{"op": "remove", "path": path}]))
    try:
        # The API server's typed-patch cache follows the CRD within moments.
        eventually(
            lambda: "activeDeadlineSeconds" not in plane.kubectl("explain", "rayjob.spec", "--api-version=ray.io/v1"),
            "the older schema served",
            30,
        )
        yield
    finally:
        plane.kubectl(
            "patch",
            "crd",
            "rayjobs.ray.io",
            "--type=json",
            "-p",
            json.dumps([{"op": "add", "path": path, "value": kept}]),
        )


@pytest.mark.cluster_scoped
def test_a_field_the_clusters_kuberay_does_not_know_fails_the_run_naming_it(real):
    """The API server answers the apply of a field an older KubeRay's CRD lacks 500; the run is FAILED at once
    naming the field and the cause, not retried until its deadline."""
    with older_rayjob_crd(real.plane):
        run_id = real.launch("old-crd", real.config("old-crd"))
        record = real.h.ctx.store.get(run_id)
        assert record.state == State.FAILED, (record.state, record.reason)
        assert "the cluster's KubeRay does not know .spec.activeDeadlineSeconds" in record.reason
        assert real.rayjobs() == [] and real.replicas() == 0


def test_a_missing_namespace_fails_the_run_naming_it(real):
    missing = f"rk-missing-{uuid.uuid4().hex[:6]}"
    run_id = real.launch("nons", real.config("nons", cluster={"namespace": missing}))
    record = real.h.ctx.store.get(run_id)
    assert record.state == State.FAILED and f'namespaces "{missing}" not found' in record.reason, record.reason


def test_a_job_that_never_starts_says_what_it_waited_for(real):
    """With clusterSelector KubeRay reports the deployment Running while the Ray job is still PENDING: the
    reason says the job never started, not "still Running"."""
    run_id = real.launch("pending", real.config("pending", deadlines={"pending_seconds": 300}))
    real.submitted(run_id)  # on the dashboard, and left PENDING there
    eventually(
        lambda: (
            (
                real.custom.get_namespaced_custom_object("ray.io", "v1", real.namespace, "rayjobs", run_id).get(
                    "status"
                )
                or {}
            ).get("jobDeploymentStatus")
            == "Running"
        ),
        "KubeRay's deployment Running",
        60,
    )
    real.tick()
    assert real.state(run_id) == State.SUBMITTED
    real.h.clock.advance(301)
    assert real.until_state(run_id, State.FAILED) == State.FAILED
    reason = real.h.ctx.store.get(run_id).reason
    assert reason.startswith("the Ray job never started (jobStatus PENDING while KubeRay's deployment is Running"), (
        reason
    )


def installed(control_plane, crd: dict):
    """The control plane with one of GKE's CRDs (tests/realkube/gke_crds.py) installed and served."""
    control_plane.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(crd))
    control_plane.established(crd["metadata"]["name"])
    return control_plane


@pytest.fixture
def compute_classes(control_plane):
    from tests.realkube import gke_crds

    return installed(control_plane, gke_crds.compute_class())


def test_a_capacity_list_is_applied_as_a_compute_class_and_its_workers_run_on_its_nodes(real, compute_classes):
    from functions.core import computeclass
    from functions.core.config import RunConfig

    capacity = [{"kind": "flex-start"}, {"kind": "spot"}, {"kind": "on-demand"}]
    body = real.config("fallback", nodes=1, scaling={"nodes": 1, "capacity": capacity})
    run_id = real.launch("fallback", body)
    assert real.state(run_id) == State.SUBMITTED
    name = computeclass.class_name(RunConfig.model_validate(body).scaling)
    applied = json.loads(compute_classes.kubectl("get", "computeclass", name, "-o", "json", "--show-managed-fields"))
    assert [p.get("spot", False) for p in applied["spec"]["priorities"]] == [False, True, False]
    assert {f["manager"] for f in applied["metadata"]["managedFields"]} == {"raytune"}
    running_workers(real, 1)
    [worker] = [p for p in real.pods("ray.io/node-type=worker")]
    assert worker.spec.node_selector["cloud.google.com/compute-class"] == name
    real.end_job(run_id, "RUNNING")
    assert real.until_state(run_id, State.RUNNING) == State.RUNNING
    real.tick()
    record = real.h.ctx.store.get(run_id)
    assert list(record.nodes.values()) == ["on-demand"]  # the player's node carries no Spot or reservation label
    real.write_result(run_id)
    real.end_job(run_id, "SUCCEEDED")
    assert real.until_state(run_id, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED


@pytest.fixture
def resource_allowlists(control_plane):
    from tests.realkube import gke_crds

    return installed(control_plane, gke_crds.resource_allowlist())


def test_an_image_cache_is_allowed_and_the_workers_ask_for_nodes_that_boot_with_it(real, resource_allowlists):
    """cluster.image_cache: the launch applies the disk image's GCPResourceAllowlist (valid against the CRD GKE
    installs) before the RayCluster, and the run's worker pods select nodes with it as their secondary boot disk;
    a second run with the same cache finds the allowlist there and changes nothing."""
    from functions.core import image_cache

    cache = "projects/rk-project/global/images/raytune-trainer-0123456789ab"
    body = real.config("cached", nodes=1, scaling={"nodes": 1}, cluster={"image_cache": cache})
    run_id = real.launch("cached", body)
    assert real.state(run_id) == State.SUBMITTED
    name = image_cache.allowlist_name(cache)
    applied = json.loads(
        resource_allowlists.kubectl("get", "gcpresourceallowlist", name, "-o", "json", "--show-managed-fields")
    )
    assert applied["spec"]["allowedResourcePatterns"] == [f"^{cache}$"]
    assert {f["manager"] for f in applied["metadata"]["managedFields"]} == {"raytune"}
    running_workers(real, 1)
    [worker] = real.pods("ray.io/node-type=worker")
    key = "cloud.google.com.node-restriction.kubernetes.io/gke-secondary-boot-disk-raytune-trainer-0123456789ab"
    assert worker.spec.node_selector[key] == "CONTAINER_IMAGE_CACHE.rk-project"
    [head] = real.pods("ray.io/node-type=head")
    assert key not in (head.spec.node_selector or {})  # the head runs Ray's CPU image: nothing cached for it
    before = applied["metadata"]["resourceVersion"]
    second = real.launch(
        "cached-again", real.config("cached-again", nodes=1, scaling={"nodes": 1}, cluster={"image_cache": cache})
    )
    assert real.state(second) in (State.SUBMITTED, State.QUEUED)
    again = json.loads(resource_allowlists.kubectl("get", "gcpresourceallowlist", name, "-o", "json"))
    assert again["metadata"]["resourceVersion"] == before


# A field GKE's own CRD does not know, each refused by the real API server and named as GKE's (not KubeRay's),
# with the GKE version that brings the feature where one does.
GKE_CRD_TYPOS = [
    pytest.param(
        "compute_classes",
        {
            "apiVersion": "cloud.google.com/v1",
            "kind": "ComputeClass",
            "metadata": {"name": "raytune-typo"},
            "spec": {"priorities": [{"spot": True, "flexstart": {"enabled": True}}]},
        },
        "flexstart",
        ("the cluster's ComputeClass CRD (GKE's own) does not know",),
        id="compute class",
    ),
    pytest.param(
        "resource_allowlists",
        {
            "apiVersion": "node.gke.io/v1",
            "kind": "GCPResourceAllowlist",
            "metadata": {"name": "raytune-typo"},
            "spec": {"allowedResourcePatterns": ["^projects/p/global/images/x$"], "allowedResourcePattern": ["x"]},
        },
        "allowedResourcePattern",
        (
            "the cluster's GCPResourceAllowlist CRD (GKE's own) does not know",
            "secondary boot disks need GKE 1.30.1-gke.1329000",
        ),
        id="resource allowlist",
    ),
]


@pytest.mark.parametrize(("crd", "bad", "field", "said"), GKE_CRD_TYPOS)
def test_a_field_gkes_crd_lacks_is_refused_by_the_real_server_and_named_as_gkes(real, request, crd, bad, field, said):
    from functions.core.errors import PermanentError

    kube = request.getfixturevalue(crd).kube()
    with pytest.raises(PermanentError, match=field) as err:
        kube.apply(bad)
    assert str(err.value).startswith(said[0]), str(err.value)
    assert all(part in str(err.value) for part in said[1:]), str(err.value)


@pytest.mark.cluster_scoped
def test_a_cluster_without_the_compute_class_crd_is_named_as_the_reason(control_plane):
    """GKE older than custom compute classes has no ComputeClass CRD: the apply's 404 names the CRD and the GKE
    version that has it, and is not retried (no "HTTP 404: Not Found", no blame on KubeRay)."""
    from functions.core import computeclass, errors
    from functions.core.config import RunConfig

    control_plane.kubectl("delete", "crd", "computeclasses.cloud.google.com", "--ignore-not-found", "--wait=true")
    scaling = RunConfig.model_validate({"scaling": {"nodes": 1, "capacity": [{"kind": "spot"}]}}).scaling
    kube = control_plane.kube()
    with pytest.raises(errors.PermanentError) as err:
        kube.apply(computeclass.compute_class(scaling, {}))
    assert str(err.value).startswith("the cluster has no ComputeClass CRD (computeclasses.cloud.google.com)")
    assert computeclass.MIN_GKE_VERSION not in str(err.value) and "1.30.3-gke.1451000" in str(err.value)


# -- a lost node, as the real operator leaves it (issue 38) ----------------------------------------------------

COLLECTIVE = "RuntimeError: NCCL communicator was aborted on rank 3: Some NCCL operations have failed or timed out"


def preempt_worker(real, pod) -> None:
    """What GKE's kubelet does to a Spot VM's pods on its preemption notice: graceful node shutdown fails them."""
    shutdown = "Pod was terminated in response to imminent node shutdown."
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "phase": "Failed",
        "reason": "Terminated",
        "message": shutdown,
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": shutdown,
                "lastTransitionTime": at,
            }
        ],
    }
    real.core.patch_namespaced_pod_status(pod.metadata.name, real.namespace, {"status": status})


def running_run(real, name: str) -> str:
    """A run launched onto its own worker, its Ray job RUNNING, and the record saying so."""
    run_id = real.launch(name, real.config(name))
    running_workers(real, 1)
    real.end_job(run_id, "RUNNING")
    real.until_state(run_id, State.RUNNING)
    return run_id


def preempted_and_replaced(real, pod) -> None:
    """The worker preempted (preempt_worker), and the real KubeRay deleting it."""
    preempt_worker(real, pod)
    eventually(
        lambda: pod.metadata.name not in {p.metadata.name for p in real.pods("ray.io/node-type=worker")},
        "the failed worker deleted by KubeRay",
        30,
    )


def attempt_two_resumes_and_succeeds(real, run_id: str) -> None:
    """After the backoff, the run's attempt 2 is its own RayJob on the same run's storage (it resumes), submitted to
    the head, and the run succeeds in it."""
    real.h.clock.advance(61)
    assert real.until_state(run_id, State.SUBMITTED) == State.SUBMITTED
    assert f"{run_id}-2" in real.rayjobs()
    job = real.custom.get_namespaced_custom_object("ray.io", "v1", real.namespace, "rayjobs", f"{run_id}-2")
    assert f"--run-id {run_id}" in job["spec"]["entrypoint"]  # the same run's storage: it resumes
    assert real.submitted(f"{run_id}-2") == f"{run_id}-2"
    real.write_result(run_id)
    real.end_job(f"{run_id}-2", "SUCCEEDED")
    assert real.until_state(run_id, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED
    assert [a.number for a in real.h.ctx.store.get(run_id).attempts] == [1, 2]


def fails_in_training_in_one_attempt(real, name: str) -> None:
    run_id = running_run(real, name)
    real.end_job(run_id, "FAILED", "ValueError: no image in row 3 of the dataset")
    assert real.until_state(run_id, State.FAILED, State.QUEUED) == State.FAILED
    record = real.h.ctx.store.get(run_id)
    assert record.attempts == [] and "no image in row 3" in record.reason


def test_a_preempted_worker_the_operator_replaced_gives_the_run_its_next_attempt(real):
    """The real KubeRay deletes the failed worker within a second and makes a new one; the Ray job then fails
    with a collective-communication error that names no node. The run's attempt 2 is submitted (its own RayJob,
    resuming from the run's checkpoints) because KubeRay's Event on the RayCluster outlives the pod."""
    run_id = running_run(real, "spot")
    [pod] = real.pods("ray.io/node-type=worker")
    preempted_and_replaced(real, pod)
    real.end_job(run_id, "FAILED", COLLECTIVE)
    assert real.until_state(run_id, State.QUEUED, State.FAILED) == State.QUEUED, real.h.ctx.store.get(run_id).reason
    record = real.h.ctx.store.get(run_id)
    [first] = record.attempts[:1]
    assert any(pod.metadata.name in line and "KubeRay deleted it" in line for line in first.lost), first.lost
    assert "attempt 1 of 3 lost its nodes" in record.reason
    attempt_two_resumes_and_succeeds(real, run_id)


def kuberay_said(real, pod: str) -> list[str]:
    """What KubeRay's Events on the RayCluster say of one pod."""
    events = real.core.list_namespaced_event(real.namespace, field_selector=f"involvedObject.name={RAYCLUSTER}").items
    return [e.message for e in events if pod in (e.message or "")]


def serve_earlier_runs(real, workers: int = 15) -> None:
    """An earlier run of `workers` nodes on the RayCluster, started and ended: KubeRay created and deleted that many
    worker pods, an Event on the RayCluster each (with the head's, past client-go's burst of 25 per object)."""
    run_id = real.launch("earlier", real.config("earlier", nodes=workers, cluster={"max_worker_nodes": 16}))
    running_workers(real, workers)
    real.succeed([run_id])
    eventually(lambda: not real.pods("ray.io/node-type=worker"), "the earlier run's workers gone", 90)


def test_a_preemption_on_a_raycluster_that_served_runs_gives_the_run_its_next_attempt(real):
    """On a RayCluster whose Event budget earlier runs spent, KubeRay's recorder drops the Event of the worker it
    deletes after a Spot preemption; the Spot VM comes back under its name (its Node boots again). The run's
    attempt 2 is submitted and resumes, told by the node's identity recorded while it ran."""
    serve_earlier_runs(real)
    run_id = running_run(real, "spot-used")
    eventually(lambda: real.h.ctx.store.get(run_id).node_ids, "the run's node and its identity recorded", 30)
    [pod] = real.pods("ray.io/node-type=worker")
    node = pod.spec.node_name
    real.core.patch_node_status(node, {"status": {"nodeInfo": {"bootID": str(uuid.uuid4())}}})  # a new VM, same name
    preempted_and_replaced(real, pod)
    time.sleep(3)  # the recorder writes Events in the background: give it time to write one, were it let through
    assert kuberay_said(real, pod.metadata.name) == []  # the premise: the platform dropped the Event
    real.end_job(run_id, "FAILED", COLLECTIVE)
    assert real.until_state(run_id, State.QUEUED, State.FAILED) == State.QUEUED, real.h.ctx.store.get(run_id).reason
    record = real.h.ctx.store.get(run_id)
    assert f"attempt 1 of 3 lost its nodes: node {node}: booted again since the run ran there" in record.reason
    attempt_two_resumes_and_succeeds(real, run_id)
    # Nothing of it lingers: the signal is read, never held (no finalizer), so the group's release is KubeRay's own
    eventually(lambda: not real.pods("ray.io/node-type=worker"), "its workers gone, none left Terminating", 60)
    # ... and a real training failure on that same RayCluster still ends in one attempt
    fails_in_training_in_one_attempt(real, "bad-data-used")


def test_a_training_failure_on_the_real_operator_ends_in_one_attempt(real):
    fails_in_training_in_one_attempt(real, "bad-data")


def test_a_training_failure_whose_node_is_then_cordoned_and_tainted_ends_in_one_attempt(real):
    """The job failed with its own error, its worker pod intact; by the tick that reads the failure its node is
    cordoned and carries GKE's impending-termination taint (an upgrade's first step, a Spot notice after the fact).
    Neither took what the run ran: FAILED in one attempt, the error its reason (issue 63)."""
    run_id = running_run(real, "own-error-cordoned")
    eventually(lambda: real.h.ctx.store.get(run_id).node_ids, "the run's node and its identity recorded", 30)
    [pod] = real.pods("ray.io/node-type=worker")
    taint = {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}
    real.core.patch_node(pod.spec.node_name, {"spec": {"unschedulable": True, "taints": [taint]}})
    real.end_job(run_id, "FAILED", "ValueError: no image in row 3 of the dataset")
    assert real.until_state(run_id, State.FAILED, State.QUEUED) == State.FAILED, real.h.ctx.store.get(run_id).reason
    record = real.h.ctx.store.get(run_id)
    assert record.attempts == [] and "no image in row 3" in record.reason and "lost its nodes" not in record.reason
    assert real.core.read_node(pod.spec.node_name).spec.unschedulable  # the premise held while it was read


# -- many launches onto one RayCluster (issue 38) --------------------------------------------------------------


def test_twenty_launches_at_once_and_two_overlapping_ticks_on_a_new_raycluster(real):
    """KubeRay writes a new RayCluster's status two or three times after each change of its spec, and the
    launches change it twenty times within a second, each also writing the RayCluster's allocation in the bucket
    (the object a burst contends for most: each writer that loses pauses at random, as on the RayCluster): no
    delivery answers 5xx, every run is SUBMITTED within 45 s of its upload with its group exactly its own node, and
    nothing is left once they end."""
    from concurrent.futures import ThreadPoolExecutor

    from functions.adapters.gcs import storage_client
    from functions.core.allocation import group_name

    real.h.ctx.sleep = real.h.ctx.allocations.stored.pause = time.sleep  # the pauses as deployed, not skipped
    real.h.ctx.clock = lambda: dt.datetime.now(dt.UTC)  # and the clock: KubeRay's lag is judged by the pods' times
    names = [f"burst-{n}" for n in range(20)]
    statuses: list[int] = []

    def upload_and_deliver(name: str) -> str:
        blob = storage_client().bucket(real.bucket).blob(f"configs/{name}.json")
        blob.upload_from_string(json.dumps(real.config(name, cluster={"max_worker_nodes": 24})))
        response = post(real.servers["launch"], storage_event(real.bucket, f"configs/{name}.json", blob.generation))
        statuses.append(response.status_code)
        return f"gs://{real.bucket}/configs/{name}.json#{blob.generation}"

    def tick() -> int:
        return post(real.servers["watch"], pubsub_event({"kind": "tick"})).status_code

    started = time.monotonic()
    with ThreadPoolExecutor(22) as pool:
        refs = set(pool.map(upload_and_deliver, names))
        ticks = [pool.submit(tick), pool.submit(tick)]
        statuses += [t.result() for t in ticks]
    elapsed = time.monotonic() - started
    assert statuses == [200] * 22, statuses
    found = {}
    for name in real.h.ctx.store.blobs.list("runs/"):
        record = real.h.ctx.store.get(name.removeprefix("runs/").removesuffix(".json"))
        if record is not None and record.source.get("ref") in refs:
            found[record.run_id] = record
    assert len(found) == 20
    assert elapsed <= 45, f"the burst took {elapsed:.1f} s"
    print(f"20 launches and 2 ticks at once: all answered 200 in {elapsed:.1f} s")
    for run_id, record in found.items():
        assert record.state == State.SUBMITTED, (run_id, record.state, record.reason)
        [submission] = [t.reason for t in record.history if t.state == State.SUBMITTED]
        assert submission.endswith(f"on RayCluster {RAYCLUSTER} (1 worker node of its own)"), submission
    groups = {g["groupName"]: g["replicas"] for g in real.raycluster()["spec"]["workerGroupSpecs"]}
    assert groups == {group_name(run_id): 1 for run_id in found}
    running_workers(real, 20)
    real.succeed(found)
    assert real.replicas() == 0
    eventually(lambda: not real.pods("ray.io/node-type=worker"), "every worker gone", 90)
    real.tick()  # drained groups leave the spec
    assert real.raycluster()["spec"]["workerGroupSpecs"] == [] and real.rayjobs() == []


PROBE = "policy-probe"  # a ConfigMap the test's admission policy refuses too, to tell when it is in force


def policy_holds(real) -> bool:
    """Whether the API server enforces the test's admission policy in its namespace now (the binding reaches it
    through an informer, a second or more after it is written): a server-side dry run of the probe."""
    from tests.realkube.control_plane import CommandFailed

    try:
        real.plane.kubectl("create", "configmap", PROBE, "-n", real.namespace, "--dry-run=server")
    except CommandFailed as refused:
        if "held back by the test" in str(refused):
            return True
        raise
    return False


def ready_since(pod) -> dt.datetime:
    """When a pod became Ready, as its API object says."""
    [ready] = [c for c in pod.status.conditions if c.type == "Ready" and c.status == "True"]
    return ready.last_transition_time


def test_a_raycluster_status_kuberay_left_behind_is_asked_about_and_its_job_starts(real, tmp_path):
    """KubeRay 1.5.2 holds a RayJob in Initializing until its RayCluster's state is `ready`, and writes that state
    only from a reconcile; one whose status write fails backs off exponentially, and nothing else triggers one once
    the pods are up. Here an admission policy on this namespace refuses every status write of the RayCluster that
    does not carry the watcher's request, so KubeRay cannot catch up on its own, whenever its backoff fires: the
    watcher sees the pods ready 30 s and the state behind, asks with the annotation, KubeRay reconciles on it at
    once, and the job starts."""
    from functions.core import kuberay_lag

    held = f"hold-status-{real.namespace}"
    status = {
        "apiGroups": ["ray.io"],
        "apiVersions": ["v1"],
        "operations": ["UPDATE"],
        "resources": ["rayclusters/status"],
    }
    probe = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    asked = f"has(object.metadata.annotations) && '{kuberay_lag.ASKED_ANNOTATION}' in object.metadata.annotations"
    allowed = f"request.resource.resource == 'configmaps' ? object.metadata.name != '{PROBE}' : ({asked})"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": held},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [status, probe]},
            "validations": [{"expression": allowed, "message": "held back by the test"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": held},
        "spec": {
            "policyName": held,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": real.namespace}}},
        },
    }
    (tmp_path / "held.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
    real.plane.kubectl("apply", "-f", str(tmp_path / "held.json"))
    try:
        real.h.ctx.clock = lambda: dt.datetime.now(dt.UTC)  # the pods' Ready times are the node player's real ones
        eventually(lambda: policy_holds(real), "the policy in force", 30)
        run_id = real.launch("behind", real.config("behind"))
        running_workers(real, 1)
        eventually(lambda: all(p.status.phase == "Running" for p in real.pods()), "the head running", 60)

        def asked() -> bool:
            real.tick()
            return "asked KubeRay to look at it again" in (real.h.ctx.store.get(run_id).reason or "")

        eventually(asked, "KubeRay asked again", kuberay_lag.LAG_SECONDS + 60, every_s=1)
        asked_at = time.monotonic()
        # Measured from the pods' own Ready times, as the watcher reads them: the test sees a pod Running only
        # after it became Ready, so its own clock would start late.
        waited = (dt.datetime.now(dt.UTC) - max(ready_since(p) for p in real.pods())).total_seconds()
        assert waited >= kuberay_lag.LAG_SECONDS, f"asked {waited:.1f} s after the pods were ready"
        assert kuberay_lag.ASKED_ANNOTATION in real.raycluster()["metadata"]["annotations"]
        eventually(lambda: (real.raycluster().get("status") or {}).get("state") == "ready", "the RayCluster ready", 30)
        print(f"KubeRay wrote the status {time.monotonic() - asked_at:.1f} s after it was asked")
        real.succeed([run_id])
    finally:
        real.plane.kubectl("delete", "-f", str(tmp_path / "held.json"), "--ignore-not-found")


def test_a_sweep_holds_a_node_per_trial_at_once_and_releases_them_all_on_the_real_operator(real):
    """A sweep's group: scaling.nodes for each trial at once (2 here), made by the real KubeRay, whose head starts
    with the trial drivers' resource; the group goes when the sweep ends."""
    sweep = {
        "dataset": {"eval_fraction": 0.1},
        "sweep": {
            "space": {"lora.r": {"kind": "choice", "values": [8, 16]}},
            "trials": 4,
            "concurrent": 2,
        },
    }
    run_id = real.launch("sweep", real.config("sweep", nodes=1, **sweep))
    assert real.state(run_id) == State.SUBMITTED and real.replicas() == 2
    running_workers(real, 2)
    [head] = real.pods("ray.io/node-type=head")
    started = " ".join(head.spec.containers[0].command or []) + " ".join(head.spec.containers[0].args or [])
    assert "raytune-trial-driver" in started, started  # KubeRay passed rayStartParams' resources to `ray start`
    real.succeed([run_id])
    assert real.replicas() == 0
    eventually(lambda: not real.pods("ray.io/node-type=worker"), "the sweep's workers gone", 60)
