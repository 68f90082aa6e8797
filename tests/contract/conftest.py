"""The real control plane for the tier that needs it: one for the whole test run, started by the process that
runs the session as the run begins (tests/realkube/session.py, hooks in tests/conftest.py) from the binaries
RAYTUNE_REALKUBE names (CI unpacks ../shared/realkube there), and attached to by each process that runs one of
its tests; skipped with one line otherwise."""

from __future__ import annotations

import pytest

from tests.realkube import session
from tests.realkube.control_plane import ENV, binaries


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
