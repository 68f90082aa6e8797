"""Shared test services: fake-gcs-server, the gcloud Pub/Sub emulator, the Kubernetes API fake, a fake
GKE ClusterManager, and the Cloud Functions served over HTTP by functions-framework. The fakes
themselves live in tests/fakes/."""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from functions.local import emulators
from tests.fakes.pubsub import PubSub
from tests.harness import REGIONS, build_controller, serve_functions

# The property tests draw the same examples on every run (derandomize): a CI run fails for a change, never for
# a draw; the draws still cover what each test's strategy allows. No per-example deadline: on a shared 2-core
# machine one example may wait its turn for a CPU (timings belong to bench/, not to a test's verdict).
settings.register_profile(
    "raytune", derandomize=True, print_blob=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("raytune")

pytest_plugins = ["tests.cpu_account"]  # the suite's CPU by tier, printed at the end

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = ROOT / ".raytune" / "test-services"
# Every `raytune local` a story starts stops all it started at its end (each story holds that nothing is left);
# tests/e2e/test_warm_local.py asks for the warm cluster a user gets by default.
os.environ.setdefault("RAYTUNE_LOCAL_KEEP_WARM_S", "0")


def _pubsub_jar() -> Path:
    found = sorted(Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/lib").glob("cloud-pubsub-emulator-*.jar"))
    if not found:
        pytest.exit("the gcloud Pub/Sub emulator is not installed (gcloud components install pubsub-emulator)")
    return found[-1]


@pytest.fixture(scope="session")
def gcs_emulator():
    # killed with the test run however it ends (a timeout's SIGKILL), as the control plane's processes are
    service = emulators.fake_gcs(RUN_DIR / "fake-gcs.log", dies_with_starter=True)
    os.environ["STORAGE_EMULATOR_HOST"] = service.url
    yield service
    service.stop()


@pytest.fixture(scope="session")
def pubsub_emulator():
    port = emulators.free_port()
    service = emulators.start(
        ["java", "-Xmx256m", "-jar", str(_pubsub_jar()), "--host=127.0.0.1", f"--port={port}"],
        port,
        RUN_DIR / "pubsub.log",
        timeout_s=60,
        dies_with_starter=True,
    )
    os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{port}"
    yield service
    service.stop()


_counter = itertools.count()


@pytest.fixture
def bucket(gcs_emulator):
    from functions.adapters.gcs import storage_client

    name = f"raytune-test-{next(_counter)}-{uuid.uuid4().hex[:6]}"
    storage_client().create_bucket(name)
    return name


@pytest.fixture
def pubsub(pubsub_emulator):
    return PubSub()


@pytest.fixture
def kube_api():
    from tests.fakes.kube import FakeKube

    server = FakeKube().start()
    yield server
    server.stop()


@pytest.fixture
def controller(bucket, pubsub, kube_api):
    """A controller context on the emulators: GKE behind FakeClusterManager, kube behind the HTTP fake."""
    from functions.adapters.kube import Kube, api_client
    from functions.handlers import context

    refreshes: list[float] = []
    harness = build_controller(
        bucket,
        pubsub,
        # Short timeouts: the hung-API tests wait for them.
        lambda cluster: Kube(
            api_client(kube_api.url), on_unauthorized=lambda: refreshes.append(1), timeout_s=(1.0, 2.0)
        ),
        kube=kube_api,
    )
    harness.refreshes = refreshes
    yield harness
    context.use(None)


@pytest.fixture
def regional(bucket, pubsub):
    """This release's controller with a running GKE cluster in each region, each with its own API server."""
    from functions.adapters.kube import Kube, api_client
    from functions.handlers import context
    from tests.fakes.kube import FakeKube
    from tests.fakes.pubsub import PROJECT

    kubes = {region: FakeKube().start() for region in REGIONS}
    h = build_controller(
        bucket,
        pubsub,
        lambda cluster: Kube(api_client(kubes[cluster.location].url), timeout_s=(1.0, 2.0)),
        kube=kubes[REGIONS[0]],
    )
    h.gke.add_running(f"projects/{PROJECT}/locations/{REGIONS[1]}/clusters/raytune")
    kubes[REGIONS[1]].clock = h.clock
    h.kubes = kubes
    yield h
    context.use(None)
    for kube in kubes.values():
        kube.stop()


@pytest.fixture
def functions_server(controller):
    with serve_functions() as urls:
        yield urls


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """The real control plane of the contract tier starts in the background as the run begins, in the process
    that runs the session (before xdist starts its workers, which inherit where to find it)."""
    if hasattr(session.config, "workerinput"):
        return
    from tests.realkube import session as realkube

    session.config._realkube = realkube.start(list(session.config.args), session.config.option.markexpr or "")


def pytest_sessionfinish(session):
    starter = getattr(session.config, "_realkube", None)
    if starter is not None:
        starter.stop()


def pytest_collection_modifyitems(config, items):
    """The tests that run Ray (marked slow: 15-100 s each, most of the suite's CPU) are dealt in turn to the front
    of each xdist worker's first share, the fast tests after them. Work stealing hands worker w the w-th
    contiguous share of the list and steals from a share's tail, never its last 2 tests: in collection order
    the end-to-end tests all fell to one worker, which ran the last two alone for 94 s while the other had
    nothing left."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    fast = [item for item in items if not item.get_closest_marker("slow")]
    ordered: list = []
    for worker in range(workers):
        share = (len(items) - len(ordered)) // (workers - worker)  # xdist's split of what is left
        mine = slow[worker::workers]
        ordered += mine + fast[: max(share - len(mine), 0)]
        del fast[: max(share - len(mine), 0)]
    items[:] = ordered + fast
