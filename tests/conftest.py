"""Shared test services: fake-gcs-server, the gcloud Pub/Sub emulator, the Kubernetes API fake, a fake
GKE ClusterManager, and the Cloud Functions served over HTTP by functions-framework."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import threading
import uuid
from pathlib import Path

import pytest

from functions import emulators

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = ROOT / ".raytune" / "test-services"
PROJECT = "raytune-test"


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
    service = emulators.start(["java", "-Xmx256m", "-jar", str(_pubsub_jar()), "--host=127.0.0.1", f"--port={port}"],
                              port, RUN_DIR / "pubsub.log", timeout_s=60)
    os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{port}"
    yield service
    service.stop()


_counter = itertools.count()


@pytest.fixture
def bucket(gcs_emulator):
    from functions.gcs import storage_client

    name = f"raytune-test-{next(_counter)}-{uuid.uuid4().hex[:6]}"
    storage_client().create_bucket(name)
    return name


class PubSub:
    """Topics and pull subscriptions on the emulator."""

    def __init__(self):
        from google.cloud import pubsub_v1

        self.publisher = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()

    def topic(self, name: str) -> str:
        path = self.publisher.topic_path(PROJECT, f"{name}-{uuid.uuid4().hex[:6]}")
        self.publisher.create_topic(name=path)
        return path

    def subscribe(self, topic: str, push_endpoint: str | None = None) -> str:
        from google.cloud import pubsub_v1

        path = self.subscriber.subscription_path(PROJECT, f"sub-{uuid.uuid4().hex[:8]}")
        request = {"name": path, "topic": topic, "ack_deadline_seconds": 10}
        if push_endpoint:
            request["push_config"] = pubsub_v1.types.PushConfig(push_endpoint=push_endpoint)
        self.subscriber.create_subscription(request=request)
        return path

    def pull(self, subscription: str, max_messages: int = 50) -> list:
        response = self.subscriber.pull(subscription=subscription, max_messages=max_messages, timeout=10,
                                        return_immediately=True)
        if response.received_messages:
            self.subscriber.acknowledge(subscription=subscription,
                                        ack_ids=[m.ack_id for m in response.received_messages])
        return [m.message for m in response.received_messages]


@pytest.fixture
def pubsub(pubsub_emulator):
    return PubSub()


@pytest.fixture
def kube_api():
    from tests.fake_kube import FakeKube

    server = FakeKube().start()
    yield server
    server.stop()


class FakeClusterManager:
    """The google-cloud-container ClusterManagerClient calls GkeClusters makes, in memory.
    A created cluster is PROVISIONING until `finish_provisioning()`."""

    def __init__(self):
        self.clusters: dict[str, object] = {}
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def get_cluster(self, name):
        from google.api_core.exceptions import NotFound

        with self.lock:
            self.calls.append("get")
            if name not in self.clusters:
                raise NotFound(f"cluster {name} not found")
            return self.clusters[name]

    def create_cluster(self, parent, cluster):
        from google.api_core.exceptions import AlreadyExists
        from google.cloud import container_v1

        with self.lock:
            self.calls.append("create")
            obj = container_v1.Cluster(cluster)
            name = f"{parent}/clusters/{obj.name}"
            if name in self.clusters:
                raise AlreadyExists(f"cluster {name} exists")
            obj.status = container_v1.Cluster.Status.PROVISIONING
            self.clusters[name] = obj
            return container_v1.Operation(name="op-create")

    def update_cluster(self, name, update):
        from google.cloud import container_v1

        with self.lock:
            self.calls.append("update")
            update = container_v1.ClusterUpdate(update)  # the request as the API would parse it
            cluster = self.clusters[name]
            cluster.addons_config.ray_operator_config = update.desired_addons_config.ray_operator_config
            cluster.status = container_v1.Cluster.Status.RECONCILING
            return container_v1.Operation(name="op-update")

    def finish_provisioning(self):
        from google.cloud import container_v1

        with self.lock:
            for cluster in self.clusters.values():
                cluster.status = container_v1.Cluster.Status.RUNNING
                cluster.endpoint = "10.0.0.1"

    def add_running(self, path: str, ray_operator: bool = True):
        from google.cloud import container_v1

        cluster = container_v1.Cluster(name=path.rsplit("/", 1)[-1], status=container_v1.Cluster.Status.RUNNING,
                                       endpoint="10.0.0.1")
        cluster.addons_config.ray_operator_config.enabled = ray_operator
        self.clusters[path] = cluster


class FakeClock:
    def __init__(self):
        self.now = dt.datetime.now(dt.timezone.utc)
        self.lock = threading.Lock()

    def __call__(self) -> dt.datetime:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += dt.timedelta(seconds=seconds)


CLUSTER_PATH = f"projects/{PROJECT}/locations/us-central1/clusters/raytune"
HF_TOKEN = "hf_TestTokenDoNotLeak0123456789abcdef"


class Harness:
    """The controller context plus handles on every stand-in behind it."""

    def __init__(self, ctx, events, gke, kube, clock, pubsub):
        self.ctx, self.events, self.gke, self.kube, self.clock, self.pubsub = ctx, events, gke, kube, clock, pubsub

    def finished_events(self) -> list[dict]:
        import json

        return [json.loads(m.data) for m in self.pubsub.pull(self.events)]


@pytest.fixture
def controller(bucket, pubsub, kube_api):
    """A controller context on the emulators: GKE behind FakeClusterManager, kube behind the HTTP fake."""
    from functions import context, logs
    from functions.context import Context
    from functions.gke import GkeClusters, GkePlatform
    from functions.kube import Kube, api_client
    from functions.pubsub import Publisher
    from functions.runs import RunStore
    from functions.gcs import Bucket
    from functions.settings import Settings

    events_topic = pubsub.topic("run-events")
    settings = Settings(project=PROJECT, bucket=bucket, watch_topic=f"projects/{PROJECT}/topics/raytune-watch",
                        events_topic=events_topic, max_event_age_s=3600, hf_token=HF_TOKEN)
    logs.add_secret(HF_TOKEN)
    manager = FakeClusterManager()
    manager.add_running(CLUSTER_PATH)
    platform = GkePlatform(PROJECT, HF_TOKEN, clusters=GkeClusters(PROJECT, client=manager),
                           kube_factory=lambda cluster: Kube(api_client(kube_api.url)))
    clock = FakeClock()
    ctx = Context(settings=settings, store=RunStore(Bucket(bucket)), platform=platform, publisher=Publisher(),
                  clock=clock, sleep=lambda s: None)
    harness = Harness(ctx, pubsub.subscribe(events_topic), manager, kube_api, clock, pubsub)
    context.use(ctx)
    yield harness
    context.use(None)


@pytest.fixture
def functions_server(controller):
    """main.py's targets served over HTTP by functions-framework (in this process, so it shares the context)."""
    import functions_framework
    from werkzeug.serving import make_server

    servers = {}
    for target in ("launch", "watch"):
        app = functions_framework.create_app(target=target, source=str(ROOT / "main.py"), signature_type="cloudevent")
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[target] = server
    yield {name: f"http://127.0.0.1:{s.server_port}" for name, s in servers.items()}
    for server in servers.values():
        server.shutdown()
