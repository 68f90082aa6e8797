"""The real control plane for the tier that needs it: started once, on first use, from the binaries
RAYTUNE_REALKUBE names (CI unpacks ../shared/realkube there), and stopped when tests/contract/ is done, so it
burns no CPU under the rest of the suite; skipped with one line otherwise."""

from __future__ import annotations

import pytest

from tests.realkube.control_plane import ENV, ControlPlane, binaries

NO_CAPACITY = "cloud.google.com/reservation-name"


@pytest.fixture(scope="package")
def control_plane():
    folder = binaries()
    if folder is None:
        pytest.skip(
            f"the real Kubernetes tier needs {ENV}=<dir with bin/kube-apiserver, bin/etcd, bin/kube-controller-manager, "
            "bin/kuberay-operator, kuberay/>; .ci/run sets it from ../shared/realkube"
        )
    plane = ControlPlane(folder)
    try:
        # Nodes for any selector appear as Autopilot would make them, except for a reservation: "no capacity".
        plane.start(kubelet_args=("--no-capacity-for", NO_CAPACITY))
        yield plane
    finally:
        plane.stop()
