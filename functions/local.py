"""The embedded local default: the same launch and watch handlers, on this machine.

The bucket is fake-gcs-server (run records, the uploaded config), the cluster a local Ray cluster (a
head without CPUs for training, as on GKE, plus a worker group of 1-CPU worker nodes that scales up
for the run and back to zero after it, like the RayCluster's GPU group), the RayJob a Ray Jobs API
submission of the trainer entrypoint, checkpoints a local folder, the model the tiny Gemma 3.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from functions import emulators, events, launch, manifests, watch
from functions.config import RunConfig
from functions.context import Context
from functions.platform import ClusterReadiness, Workers
from functions.runs import RunStore
from functions.settings import Settings
from trainer.codehash import ROOT, code_files, code_sha256

BUCKET = "raytune-local"
EVENTS_TOPIC = "local/run-events"
TICK_S = 2.0
PROGRESS = re.compile(r"\{'loss'|'train_runtime'|Checkpoint successfully created|Error|error:")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
JOB_DEPLOYMENT = {"PENDING": "Initializing", "RUNNING": "Running", "SUCCEEDED": "Complete",
                  "STOPPED": "Complete", "FAILED": "Failed"}


def _iso(ms: int | None) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat() if ms else None


class LocalRay:
    """Platform on a Ray cluster of local processes, driven through the Ray Jobs API."""

    def __init__(self, workdir: Path, cpus_per_worker: int = 1):
        self.workdir = workdir
        self.cpus_per_worker = cpus_per_worker
        # Ray's socket paths are length-limited: keep its temp dir short.
        self.ray_tmp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
        self.head: emulators.Service | None = None
        self.dashboard_port = 0
        self.nodes: list[emulators.Service] = []  # the worker group
        self.generation = 0  # bumped on every scale: the precondition scale() checks
        self.lock = threading.RLock()
        self._client = None
        os.environ.setdefault("RAY_AUTH_MODE", "token")

    def _ray_start(self, args: list[str], port: int, name: str) -> emulators.Service:
        """One `ray start --block` (a pod, on GKE), ready once it says so in its log."""
        ray = str(Path(sys.executable).parent / "ray")
        log = self.workdir / f"{name}.log"
        log.unlink(missing_ok=True)
        env = {"RAY_TMPDIR": self.ray_tmp, "RAY_USAGE_STATS_ENABLED": "0"}
        return emulators.start([ray, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", *args],
                               port, log, env=env, timeout_s=180,
                               ready=lambda: log.exists() and "Ray runtime started" in log.read_text(errors="replace"))

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        with self.lock:
            if self.head is None:
                port, self.dashboard_port = emulators.free_port(), emulators.free_port()
                self.head = self._ray_start(
                    ["--head", f"--port={port}", "--num-cpus=0",
                     f"--dashboard-port={self.dashboard_port}", f"--temp-dir={self.ray_tmp}"], port, "ray-head")
                emulators.wait_until(lambda: emulators.port_open(self.dashboard_port), "dashboard up", 120)
        return ClusterReadiness("ready")

    @property
    def client(self):
        from ray.job_submission import JobSubmissionClient

        with self.lock:
            if self._client is None:
                self._client = JobSubmissionClient(f"http://127.0.0.1:{self.dashboard_port}")
            return self._client

    def _scale_to(self, replicas: int) -> None:
        while len(self.nodes) < replicas:
            # Nodes on one machine need ports of their own (on GKE each pod has its own address).
            ports = [emulators.free_port() for _ in range(2)]
            low = 20000 + 1000 * len(self.nodes)
            self.nodes.append(self._ray_start(
                [f"--address=127.0.0.1:{self.head.port}", f"--num-cpus={self.cpus_per_worker}",
                 f"--dashboard-agent-listen-port={ports[0]}", f"--metrics-export-port={ports[1]}",
                 f"--min-worker-port={low}", f"--max-worker-port={low + 999}"],
                self.head.port, f"ray-worker-{len(self.nodes)}"))
        while len(self.nodes) > replicas:
            self.nodes.pop().stop()
        self.generation += 1

    def submit(self, cfg: RunConfig, run_id: str, worker_replicas: int, env: dict[str, str]) -> None:
        with self.lock:
            if len(self.nodes) != worker_replicas:
                self._scale_to(worker_replicas)
        if self.job_status(cfg, run_id) is not None:
            return  # submitted before: the submission id is the run id
        self.client.submit_job(
            entrypoint=manifests.entrypoint(cfg, run_id, python=sys.executable), submission_id=run_id,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "RAYTUNE_CODE_SHA256": code_sha256(code_files()),
                                      **env}})

    def job_status(self, cfg: RunConfig, run_id: str) -> dict | None:
        try:
            info = self.client.get_job_info(run_id)
        except RuntimeError as err:
            if "does not exist" in str(err):
                return None
            raise
        status = str(info.status.value)
        return {"jobStatus": status, "jobDeploymentStatus": JOB_DEPLOYMENT[status], "message": info.message,
                "startTime": _iso(info.start_time), "endTime": _iso(info.end_time)}

    def logs(self, run_id: str) -> str:
        return self.client.get_job_logs(run_id)

    def stop(self, cfg: RunConfig, run_id: str) -> None:
        self.client.stop_job(run_id)

    def workers(self, cfg: RunConfig) -> Workers | None:
        with self.lock:
            return None if self.head is None else Workers(len(self.nodes), self.generation)

    def scale(self, cfg: RunConfig, workers: Workers, replicas: int) -> bool:
        with self.lock:
            if workers.handle != self.generation:
                return False
            self._scale_to(replicas)
            return True

    def shutdown(self) -> None:
        with self.lock:
            self._scale_to(0)
            if self.head:
                self.head.stop()
                self.head = None


class ConsolePublisher:
    """Run-finished events go to the console locally (Pub/Sub in the cloud)."""

    def __init__(self, say):
        self.say = say

    def publish(self, topic: str, message: dict, **attributes: str) -> str:
        self.say(f"event -> {topic}: {json.dumps(message, sort_keys=True)}")
        return "local"


class Console:
    def __init__(self):
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)


def run(config_path: str, workdir: Path = ROOT / ".raytune" / "local") -> int:
    """`raytune local CONFIG`: upload the config, launch, watch to the end, print the run record."""
    from functions.gcs import Bucket, storage_client

    say = Console()
    # A terminated `raytune local` still stops its Ray nodes and fake-gcs-server (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("functions").setLevel(logging.INFO)
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoints = workdir / "checkpoints"
    gcs = emulators.fake_gcs(workdir / "fake-gcs.log", data_dir=workdir / "gcs")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
    platform = LocalRay(workdir)
    try:
        client = storage_client()
        if client.lookup_bucket(BUCKET) is None:
            client.create_bucket(BUCKET)
        say(f"bucket gs://{BUCKET} on fake-gcs-server {gcs.url}; checkpoints in {checkpoints}")
        raw = json.loads(Path(config_path).read_text())
        raw.setdefault("storage_path", str(checkpoints))
        blob = client.bucket(BUCKET).blob(f"configs/{Path(config_path).name}")
        blob.upload_from_string(json.dumps(raw), content_type="application/json")
        say(f"uploaded gs://{BUCKET}/{blob.name}#{blob.generation}")
        settings = Settings(project="local", bucket=BUCKET, watch_topic=None, events_topic=EVENTS_TOPIC,
                            max_event_age_s=3600, hf_token=os.environ.get("HF_TOKEN") or None)
        ctx = Context(settings=settings, store=RunStore(Bucket(BUCKET)), platform=platform,
                      publisher=ConsolePublisher(say))
        event = events.object_finalized(BUCKET, blob.name, blob.generation, blob.size, blob.time_created)
        record = launch.handle(event, ctx)
        say(f"launch: run {record.run_id} is {record.state.value}: {record.reason}")
        say(f"worker group: {len(platform.nodes)} nodes")
        return _follow(ctx, platform, record.run_id, say)
    finally:
        platform.shutdown()
        gcs.stop()


def _follow(ctx: Context, platform: LocalRay, run_id: str, say) -> int:
    state, shown = None, set()
    while True:
        watch.handle(events.message_published({"kind": "tick"}, str(time.time_ns())), ctx)
        record = ctx.store.get(run_id)
        if record.state != state:
            state = record.state
            say(f"run {run_id}: {state.value}" + (f" ({record.reason})" if record.reason else ""))
        if platform.head is not None and platform.job_status(None, run_id) is not None:
            for line in platform.logs(run_id).splitlines():
                # Ray forwards a worker's line from several log streams: show each once.
                if PROGRESS.search(line) and line not in shown:
                    shown.add(line)
                    say("  " + ANSI.sub("", line).strip()[:200])
        if record.settled:
            say(f"worker group: {len(platform.nodes)} nodes (scaled down after the run)")
            print(json.dumps(record.model_dump(mode="json"), indent=2))
            return 0 if record.state.value == "SUCCEEDED" else 1
        time.sleep(TICK_S)
