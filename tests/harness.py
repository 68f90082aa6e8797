"""What tests build a controller from, and how they serve it: imported by the fixtures in tests/conftest.py and by
tests that need one of their own (the contract tiers), never from conftest itself."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from tests.fakes.clock import FakeClock
from tests.fakes.gke import FakeClusterManager
from tests.fakes.http import serve_in_thread
from tests.fakes.pubsub import PROJECT

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_PATH = f"projects/{PROJECT}/locations/us-central1/clusters/raytune"
HF_TOKEN = "hf_TestTokenDoNotLeak0123456789abcdef"
# The tracking destinations' credentials a deployment holds (a W&B key's shape: 40 hex characters).
TRACKING_CREDENTIALS = {
    "WANDB_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
    "MLFLOW_TRACKING_TOKEN": "mlflow-token-DoNotLeak-4242",
}
REGIONS = ("us-central1", "europe-west4")  # a deployment of two regions (the `regional` fixture)


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
    from functions.adapters.gke import GkePlatform
    from functions.adapters.gke_clusters import GkeClusters
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
        tracking_credentials=TRACKING_CREDENTIALS,
    )
    for secret in (HF_TOKEN, *TRACKING_CREDENTIALS.values()):
        add_secret(secret)
    manager = FakeClusterManager()
    manager.add_running(CLUSTER_PATH.replace(PROJECT, project, 1))
    platform = GkePlatform(
        project,
        HF_TOKEN,
        clusters=GkeClusters(project, client=manager, create=True),
        kube_factory=kube_for,
        owner=owner_id(bucket),
        credentials=TRACKING_CREDENTIALS,
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


def patch_metadata(bucket: str, path: str, metadata: dict[str, str]) -> None:
    """An object's custom metadata patched in place (its generation kept), as a release before issue 51 noted a
    record's generation on its marker."""
    from functions.adapters.gcs import storage_client

    blob = storage_client().bucket(bucket).blob(path)
    blob.metadata = metadata
    blob.patch()


def tiny_checkpointed(name: str, *, samples: int, eval_fraction: float, max_steps: int, **sections: Any) -> dict:
    """A run config of the tiny Gemma 3 on the synthetic products, on CPU, that trains `max_steps` steps and
    checkpoints every few: what the stories of lost nodes and resumed sweeps lose and resume. `sections` are merged
    over it, a section at a time (training's and scaling's keys into its own)."""
    config: dict = {
        "name": name,
        "model": {"id": "tiny://gemma3", "dtype": "float32", "quantization": "none"},
        "dataset": {"id": "tiny://products", "max_samples": samples, "eval_fraction": eval_fraction},
        "training": {
            "max_steps": max_steps,
            "per_device_batch_size": 1,
            "optim": "adamw_torch",
            "max_length": 256,
            "logging_steps": 1,
            "save_strategy": "steps",
            "save_steps": 4,
        },
        # No in-job restart: a lost node ends the job (or a sweep's trial), and what comes next resumes it.
        "scaling": {"nodes": 1, "gpus_per_node": 0, "max_failures": 0},
    }
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values} if isinstance(config.get(section), dict) else values
    return config
