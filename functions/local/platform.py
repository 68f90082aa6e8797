"""The local Platform: a Ray cluster of local processes (a head without CPUs for training, as on GKE,
plus a worker group of 1-CPU worker nodes that scales up for the run and back to zero after it, like
the RayCluster's GPU group), the RayJob a Ray Jobs API submission of the trainer entrypoint."""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from functions.core import manifests
from functions.core.config import RunConfig
from functions.core.platform import ClusterReadiness, Workers
from functions.local import emulators
from trainer.codehash import ROOT, code_files, code_sha256

JOB_DEPLOYMENT = {
    "PENDING": "Initializing",
    "RUNNING": "Running",
    "SUCCEEDED": "Complete",
    "STOPPED": "Complete",
    "FAILED": "Failed",
}


def _iso(ms: int | None) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat() if ms else None


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
        return emulators.start(
            [ray, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", *args],
            port,
            log,
            env=env,
            timeout_s=180,
            ready=lambda: log.exists() and "Ray runtime started" in log.read_text(errors="replace"),
        )

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        with self.lock:
            if self.head is None:
                port, self.dashboard_port = emulators.free_port(), emulators.free_port()
                self.head = self._ray_start(
                    [
                        "--head",
                        f"--port={port}",
                        "--num-cpus=0",
                        f"--dashboard-port={self.dashboard_port}",
                        f"--temp-dir={self.ray_tmp}",
                    ],
                    port,
                    "ray-head",
                )
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
            assert self.head is not None, "the head starts before any worker"
            # Nodes on one machine need ports of their own (on GKE each pod has its own address).
            ports = [emulators.free_port() for _ in range(2)]
            low = 20000 + 1000 * len(self.nodes)
            self.nodes.append(
                self._ray_start(
                    [
                        f"--address=127.0.0.1:{self.head.port}",
                        f"--num-cpus={self.cpus_per_worker}",
                        f"--dashboard-agent-listen-port={ports[0]}",
                        f"--metrics-export-port={ports[1]}",
                        f"--min-worker-port={low}",
                        f"--max-worker-port={low + 999}",
                    ],
                    self.head.port,
                    f"ray-worker-{len(self.nodes)}",
                )
            )
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
            entrypoint=manifests.entrypoint(cfg, run_id, python=sys.executable),
            submission_id=run_id,
            runtime_env={
                "env_vars": {"PYTHONPATH": str(ROOT), "RAYTUNE_CODE_SHA256": code_sha256(code_files()), **env}
            },
        )

    def job_status(self, cfg: RunConfig | None, run_id: str) -> dict[str, Any] | None:
        try:
            info = self.client.get_job_info(run_id)
        except RuntimeError as err:
            if "does not exist" in str(err):
                return None
            raise
        status = str(info.status.value)
        return {
            "jobStatus": status,
            "jobDeploymentStatus": JOB_DEPLOYMENT[status],
            "message": info.message,
            "startTime": _iso(info.start_time),
            "endTime": _iso(info.end_time),
        }

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
