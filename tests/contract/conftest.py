"""The real control plane for the tier that needs it: one for the whole test run, started by the process that
runs the session as the run begins (tests/realkube/session.py, hooks in tests/conftest.py) from the binaries
RAYTUNE_REALKUBE names (CI unpacks ../shared/realkube there), and attached to by each process that runs one of
its tests; skipped with one line otherwise."""

from __future__ import annotations

import uuid

import pytest

from functions.core.policy import Policy
from tests.realkube import session
from tests.realkube.control_plane import ENV, ControlPlane, binaries

# Two regions, each its own control plane: in FIRST the node player's fake Autopilot makes no GPU node.
FIRST, SECOND = "us-central1", "europe-west4"
ACCELERATOR = "cloud.google.com/gke-accelerator"


@pytest.fixture(scope="session")
def shared_plane():
    if binaries() is None:
        pytest.skip(
            f"the real Kubernetes tier needs {ENV}=<dir with bin/kube-apiserver, bin/etcd, bin/kube-controller-manager, "
            "bin/kuberay-operator, kuberay/>; .ci/run sets it from ../shared/realkube"
        )
    try:
        return session.attach()
    except Exception as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def control_plane(shared_plane, request):
    """The run's control plane for one test: with the other processes' tests, or alone for a test marked
    cluster_scoped (it changes a CRD every test sees)."""
    with shared_plane.sharing(exclusive=request.node.get_closest_marker("cluster_scoped") is not None):
        yield shared_plane


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Marks a test whose body failed (`item.failed_call`): its fixtures' teardown then tells what the control
    plane's players logged about it, which is all a CI log has to go on afterwards."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item.failed_call = True


@pytest.fixture(scope="module")
def starved_plane():
    """A second control plane (kube-apiserver, etcd, controller-manager, KubeRay) whose fake Autopilot makes no GPU
    node: the region without capacity. About 15 s to start; stopped with the module."""
    found = binaries()
    if found is None:
        pytest.skip("the real Kubernetes tier needs RAYTUNE_REALKUBE (see tests/contract/conftest.py)")
    plane = ControlPlane(found).start(kubelet_args=("--no-capacity-for", ACCELERATOR))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def regions(control_plane, starved_plane, bucket, pubsub):
    """The controller over HTTP with each region's cluster on its own control plane: {region: Real}."""
    from functions.handlers import context
    from tests.contract.test_realkube import Real
    from tests.harness import PROJECT, build_controller, serve_functions

    planes = {FIRST: starved_plane, SECOND: control_plane}
    namespace = f"rk-{uuid.uuid4().hex[:8]}"
    for plane in planes.values():
        plane.kubectl("create", "namespace", namespace)
    harness = build_controller(
        bucket,
        pubsub,
        lambda cluster: planes[cluster.location].kube(),
        policy=Policy(namespaces=("rk-*",), regions=(FIRST, SECOND)),
    )
    harness.gke.add_running(f"projects/{PROJECT}/locations/{SECOND}/clusters/raytune")
    try:
        with serve_functions() as urls:
            yield {region: Real(plane, harness, urls, bucket, namespace) for region, plane in planes.items()}
    finally:
        context.use(None)
        for plane in planes.values():
            plane.kubectl("delete", "namespace", namespace, "--wait=false")
