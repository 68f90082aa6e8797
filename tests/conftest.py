"""Shared test services: fake-gcs-server, the gcloud Pub/Sub emulator, the Kubernetes API fake, a fake
GKE ClusterManager, and the Cloud Functions served over HTTP by functions-framework. The fakes
themselves live in tests/fakes/."""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

from functions.local import emulators
from tests.fakes.clock import FakeClock
from tests.fakes.gke import FakeClusterManager
from tests.fakes.http import serve_in_thread
from tests.fakes.pubsub import PROJECT, PubSub

# The property tests draw the same examples on every run (derandomize): a CI run fails for a change, never for
# a draw; the draws still cover what each test's strategy allows.
settings.register_profile("raytune", derandomize=True, print_blob=True)
settings.load_profile("raytune")

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = ROOT / ".raytune" / "test-services"


def _pubsub_jar() -> Path:
    found = sorted(Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/lib").glob("cloud-pubsub-emulator-*.jar"))
    if not found:
        pytest.exit("the gcloud Pub/Sub emulator is not installed (gcloud components install pubsub-emulator)")
    return found[-1]


@pytest.fixture(scope="session")
def gcs_emulator():
    service = emulators.fake_gcs(RUN_DIR / "fake-gcs.log")
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


CLUSTER_PATH = f"projects/{PROJECT}/locations/us-central1/clusters/raytune"
HF_TOKEN = "hf_TestTokenDoNotLeak0123456789abcdef"


class Harness:
    """The controller context plus handles on every stand-in behind it."""

    def __init__(self, ctx, events, gke, kube, clock, pubsub):
        self.ctx, self.events, self.gke, self.kube, self.clock, self.pubsub = ctx, events, gke, kube, clock, pubsub

        self.published: list[tuple[dict, dict]] = []  # (message, attributes) pulled so far

    def all_events(self) -> list[tuple[dict, dict]]:
        import json

        self.published += [(json.loads(m.data), dict(m.attributes)) for m in self.pubsub.pull(self.events)]
        return list(self.published)

    def finished_events(self) -> list[dict]:
        """Run-finished events (and quarantine reports) published so far."""
        return [m for m, attributes in self.all_events() if attributes.get("event") in (None, "run-finished")]

    def events_of(self, kind: str) -> list[dict]:
        return [m for m, attributes in self.all_events() if attributes.get("event") == kind]


def build_controller(bucket: str, pubsub, kube_for, kube=None, project: str = PROJECT, **settings) -> Harness:
    """A controller context on the emulators, GKE behind FakeClusterManager (a running cluster `raytune` of
    `project`) and Kubernetes behind `kube_for` (cluster -> Kube); `settings` override the defaults. In use
    (functions.handlers.context) until `context.use(None)`."""
    from functions.adapters.gcs import Bucket
    from functions.adapters.gke import GkeClusters, GkePlatform
    from functions.adapters.pubsub import Publisher
    from functions.adapters.store import RunStore
    from functions.core.manifests import owner_id
    from functions.core.secrets import add_secret
    from functions.handlers import context
    from functions.handlers.context import Context
    from functions.handlers.settings import Settings

    events_topic = pubsub.topic("run-events")
    values = dict(
        project=project,
        bucket=bucket,
        watch_topic=f"projects/{project}/topics/raytune-watch",
        events_topic=events_topic,
        max_event_age_s=3600,
        hf_token=HF_TOKEN,
    )
    add_secret(HF_TOKEN)
    manager = FakeClusterManager()
    manager.add_running(CLUSTER_PATH.replace(PROJECT, project, 1))
    platform = GkePlatform(
        project,
        HF_TOKEN,
        clusters=GkeClusters(project, client=manager, create=True),
        kube_factory=kube_for,
        owner=owner_id(bucket),
    )
    clock = FakeClock()
    ctx = Context(
        settings=Settings(**{**values, **settings}),
        store=RunStore(Bucket(bucket)),
        platform=platform,
        publisher=Publisher(),
        clock=clock,
        sleep=lambda s: None,
    )
    if kube is not None:
        kube.clock = clock  # the API server's creationTimestamps on the controller's clock
    context.use(ctx)
    return Harness(ctx, pubsub.subscribe(events_topic), manager, kube, clock, pubsub)


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


@contextlib.contextmanager
def serve_functions():
    """main.py's targets served over HTTP by functions-framework (in this process, so they share the context in
    use): {"launch": url, "watch": url}."""
    import functions_framework
    from werkzeug.serving import make_server

    servers = {}
    for target in ("launch", "watch"):
        app = functions_framework.create_app(target=target, source=str(ROOT / "main.py"), signature_type="cloudevent")
        server = make_server("127.0.0.1", 0, app, threaded=True)
        serve_in_thread(server)
        servers[target] = server
    try:
        yield {name: f"http://127.0.0.1:{s.server_port}" for name, s in servers.items()}
    finally:
        for server in servers.values():
            server.shutdown()


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
