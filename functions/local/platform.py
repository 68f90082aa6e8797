"""The local Platform: a Ray cluster of local processes (a head without CPUs for training, as on GKE,
plus a worker group per run that scales up for the run and back to zero after it, like the RayCluster's GPU
groups), the RayJob a Ray Jobs API submission of the trainer entrypoint.

A worker group of N nodes is one local Ray node with the resources of N (N x the CPUs, GPUs and units of the
group's resource that each of its GKE pods has): the controller sizes, scales and drains it as it does the
RayCluster's group, Ray Train places one worker per unit as on GKE, and a local run pays one node's start and
upkeep (its `ray start`, raylet and agents: about 4 s of CPU and 1-2 s of wall a node here) instead of N.

The processes themselves (the head, a node per group, their start and stop) are functions/local/cluster.py's;
this module answers the controller's Platform questions on them through the Ray Jobs API.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import requests

from functions.core import joblog, manifests
from functions.core.allocation import group_name, key_path
from functions.core.config import ClusterSpec, RunConfig
from functions.core.errors import NotFound, PermanentError, TransientError, from_status
from functions.core.platform import AttemptSpan, ClusterReadiness, NodeSeen, RayObject, Waiting, Workers
from functions.core.result import WORKER_RESOURCE_ENV
from functions.local import session
from functions.local.cluster import LocalCluster
from functions.local.nodes import NodeShape
from functions.local.workdirs import mlflow_store
from trainer.codehash import code_files, code_sha256

JOB_DEPLOYMENT = {
    "PENDING": "Initializing",
    "RUNNING": "Running",
    "SUCCEEDED": "Complete",
    "STOPPED": "Complete",
    "FAILED": "Failed",
}
# Regions, comma-separated, where the local platform never gets GPUs: runs there wait, and move on where their
# config lists fallback regions (docs/regions.md).
NO_CAPACITY_ENV = "RAYTUNE_LOCAL_NO_CAPACITY"


def _iso(ms: int | None) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat() if ms else None


def machine_gpus() -> int:
    """NVIDIA GPUs on this machine (0 without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def check_fits(cfg: RunConfig, gpus: int) -> None:
    """A GPU config must fit this machine's GPUs; say what would."""
    scaling = cfg.scaling
    wanted = cfg.group_nodes * scaling.gpus_per_node
    if wanted > gpus:
        raise PermanentError(
            f"the run asks for {cfg.group_nodes} x {scaling.gpus_per_node} GPUs; this machine has {gpus}: "
            + (
                "set scaling.gpus_per_node to 0 for a CPU run"
                if gpus == 0
                else f"set scaling.nodes x scaling.gpus_per_node to at most {gpus} for a local run"
            )
        )


@contextlib.contextmanager
def jobs_api(what: str) -> Iterator[None]:
    """The Ray Jobs client raises RuntimeError("Request failed with status code N: ...") for an HTTP error
    and requests' exceptions for a dropped or refused connection. Translated into the controller's errors,
    so a busy dashboard (a 5xx, a reset) is retried on the next tick instead of failing the run."""
    try:
        yield
    except requests.RequestException as err:
        raise TransientError(f"Ray Jobs API, {what}: {err}") from err
    except RuntimeError as err:
        status = re.search(r"status code (\d{3})", str(err))
        if status is None:
            raise
        raise from_status(int(status.group(1)), f"Ray Jobs API, {what}: {err}") from err


def live_driver_log(workdir: Path, run_id: str) -> Path | None:
    """A local job's driver log in Ray's session folder, the file the Jobs API serves (copied to logs/ when
    the run ends). Any Ray session of the workdir's cluster: an idle teardown and a new head start another."""
    current = session.read(workdir)
    if current is None:
        return None
    found = Path(current.ray_tmp).glob(f"session_2*/logs/job-driver-{run_id}.log")
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


class LocalRay:
    """Platform on a Ray cluster of local processes (a LocalCluster), driven through the Ray Jobs API."""

    def __init__(self, cluster: LocalCluster, gpus: int, no_capacity: Collection[str] = ()):
        """Built without I/O: `claimed` makes the cluster and counts the machine's GPUs."""
        self.cluster = cluster
        self.workdir, self.logs = cluster.workdir, cluster.logs
        self.gpus = gpus
        # Regions where GPUs never come (the local stand-in for GKE out of stock there): a run's group there is
        # sized but never started, and its job waits, as a RayJob whose worker pods stay Pending.
        self.no_capacity = frozenset(no_capacity)
        # Every region's RayCluster is this one Ray cluster: each group belongs to one of them (its allocation's
        # key_path), so sizing one region's RayCluster never touches another's groups.
        self.owner: dict[str, str] = {}
        self.starved: dict[str, dict[str, int]] = {}  # a RayCluster in a region without capacity: its groups' sizes
        self.waiting: dict[str, str] = {}  # jobs applied there, never started: job -> region
        self.stamps: dict[str, int] = {}  # each RayCluster's allocation version its groups were last sized for
        self.generation = 0  # bumped on every scale: the precondition size()/scale() check
        self.lock = threading.RLock()
        self._client: Any = None
        self._code_sha256: str | None = None

    @classmethod
    def claimed(
        cls,
        workdir: Path,
        tag: str,
        gpus: int | None = None,
        no_capacity: Collection[str] = (),
        warm: session.WorkdirSession | None = None,
    ) -> LocalRay:
        """The platform on the workdir's cluster (LocalCluster.claimed): `warm`, the session whose head an earlier
        clean run left warm (session.warm), attached to instead of starting a head; its tag is `tag`."""
        found = machine_gpus() if gpus is None else gpus
        return cls(LocalCluster.claimed(workdir, tag, warm), found, no_capacity)

    @property
    def timings(self) -> dict[str, float]:
        return self.cluster.timings

    @property
    def node_count(self) -> int:
        return self.cluster.node_count

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        with self.lock:
            if self.cluster.head is None:
                with self.cluster.timed("starting the Ray head"):
                    self.cluster.start_head()
        return ClusterReadiness("ready")

    def left_warm(self) -> session.WorkdirSession | None:
        """At a clean end: every worker group stopped, the head left running for the next run of the workdir; the
        session to keep warm, or None without a live head."""
        with self.lock:
            self._scale_to({})
            return self.cluster.session() if self.cluster.head_alive else None

    @property
    def client(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        with self.lock:
            if self._client is None:
                self._client = JobSubmissionClient(f"http://127.0.0.1:{self.cluster.dashboard_port}")
            return self._client

    def _scale_to(self, groups: dict[str, int], spec: ClusterSpec | None = None) -> None:
        """The groups of one RayCluster (`spec`; None: all of them) each at its size: a dead node is replaced, one
        of another size stopped and started at the new size (the controller only scales a group from or to zero),
        its groups left out stopped. What goes is stopped together, as KubeRay deletes pods. In a region without
        capacity the sizes are kept and nothing starts, as pods that stay Pending."""
        if spec is not None and spec.region in self.no_capacity:
            self.starved[key_path(spec)] = dict(groups)
            self.generation += 1
            return
        owner = key_path(spec) if spec is not None else None
        nodes = self.cluster.groups
        mine = {g: node for g, node in nodes.items() if owner is None or self.owner.get(g) == owner}
        # a node of another size, or a dead one (replaced below)
        resized = [g for g, n in mine.items() if n is not None and not (n.alive and n.replicas == groups.get(g, 0))]
        self.cluster.stop_groups(resized)
        for group in [g for g in mine if g not in groups]:
            del nodes[group]
            self.owner.pop(group, None)
        for group, replicas in groups.items():
            if owner is not None:
                self.owner[group] = owner
            if nodes.get(group) is None and replicas > 0:
                with self.cluster.timed("starting worker nodes"):
                    self.cluster.start_group(group, replicas)
            nodes.setdefault(group, None)
        self.generation += 1

    def size(self, cfg: RunConfig, run_id: str, workers: Workers | None, groups: dict[str, int], stamp: int) -> bool:
        scaling = cfg.scaling
        if scaling.use_gpu:
            check_fits(cfg, self.gpus)
        with self.lock:
            if self.cluster.head is None or (workers is not None and workers.handle != self.generation):
                return False
            self.cluster.shapes[group_name(run_id)] = NodeShape(
                cpus=scaling.cpus_per_worker
                if not scaling.use_gpu
                else scaling.cpus_per_worker * scaling.gpus_per_node,
                gpus=scaling.gpus_per_node,
                accelerator=scaling.accelerator if scaling.use_gpu else None,
            )
            self._scale_to(groups, cfg.cluster)
            self.stamps[key_path(cfg.cluster)] = stamp
            return True

    def code_sha256(self) -> str:
        """Hashed once per run: the fingerprint and the submission name the same code even if a file is
        edited meanwhile (the job checks the code it runs carries this hash)."""
        if self._code_sha256 is None:
            self._code_sha256 = code_sha256(code_files())
        return self._code_sha256

    def submit(self, cfg: RunConfig, run_id: str, job: str, env: dict[str, str]) -> None:
        if self.job_status(cfg, job) is not None:
            return  # submitted before: the submission id is the attempt's job name
        if cfg.cluster.region in self.no_capacity:
            self.waiting[job] = cfg.cluster.region  # applied; its workers never come there
            return
        # No runtime env: the job's processes are the cluster's own (PYTHONPATH and the rest come from the nodes'
        # environment); the variables meant for the driver are set on its command.
        variables = {
            # Every process of the job talks to this cluster only, never to another local one on the
            # machine (Ray's address "auto" finds them all: "Found multiple active Ray instances").
            "RAY_ADDRESS": f"127.0.0.1:{self.cluster.head.port}" if self.cluster.head else "",
            "RAYTUNE_CODE_SHA256": self.code_sha256(),
            WORKER_RESOURCE_ENV: group_name(run_id),
            **self.tracking_env(cfg),
            **env,
        }
        with jobs_api(f"submit {job}"):
            self.client.submit_job(
                entrypoint=manifests.entrypoint(cfg, run_id, python=sys.executable, env=variables),
                submission_id=job,
            )

    def tracking_env(self, cfg: RunConfig) -> dict[str, str]:
        """The embedded default's MLflow store: a run tracked in MLflow with no server named (neither in its
        config nor in MLFLOW_TRACKING_URI) goes to an SQLite store in the workdir (`mlflow ui` opens it)."""
        if cfg.tracking is None or not cfg.tracking.mlflow_unplaced or os.environ.get("MLFLOW_TRACKING_URI"):
            return {}
        return {"MLFLOW_TRACKING_URI": mlflow_store(self.workdir)}

    def job_status(self, cfg: RunConfig | None, job: str) -> dict[str, Any] | None:
        if self.cluster.head is None:
            return None  # no cluster, no job
        if job in self.waiting and (cfg is None or cfg.cluster.region == self.waiting[job]):
            return {"jobStatus": "PENDING", "jobDeploymentStatus": JOB_DEPLOYMENT["PENDING"]}
        try:
            with jobs_api(f"status of {job}"):
                info = self.client.get_job_info(job)
        except NotFound:
            return None
        status = str(info.status.value)
        return {
            "jobStatus": status,
            "jobDeploymentStatus": JOB_DEPLOYMENT[status],
            "message": self._failure(job, info.message) if status == "FAILED" else info.message,
            "startTime": _iso(info.start_time),
            "endTime": _iso(info.end_time),
        }

    def job_log(self, cfg: RunConfig, job: str, limit: int | None = None) -> str:
        if limit is None:
            return self.job_logs(job)
        path = live_driver_log(self.workdir, job)
        if path is None:
            return ""
        with path.open("rb") as log:
            return joblog.tail(iter(lambda: log.read(joblog.LOG_READ_BYTES), b""), limit).decode("utf-8", "replace")

    def job_logs(self, run_id: str) -> str:
        """The driver's log so far, read from the file rather than through the dashboard: no HTTP call to
        fail or hang on a busy machine, and still there after the cluster's idle teardown."""
        path = live_driver_log(self.workdir, run_id)
        return path.read_text(errors="replace") if path else ""

    def save_job_log(self, run_id: str) -> Path | None:
        """The job driver's log, copied into the workdir (the cluster and its logs go with the run)."""
        text = self.job_logs(run_id)
        if not text:
            return None
        path = self.logs / f"{run_id}-driver.log"
        path.write_text(text)
        return path

    def _failure(self, run_id: str, message: str | None) -> str:
        """A failed job's reason for people: the root cause's last exception line and where the log is."""
        path = self.save_job_log(run_id)
        text = path.read_text(errors="replace") if path else ""
        cause = joblog.root_cause(text) or joblog.clean((message or "the job failed").strip().splitlines()[-1])
        return f"{cause[: joblog.REASON_LIMIT]}" + (f" (driver log: {path})" if path else "")

    def stop(self, spec: ClusterSpec | None, job: str) -> None:
        if job in self.waiting and (spec is None or spec.region == self.waiting[job]):
            del self.waiting[job]
            return
        if self.cluster.head is not None:
            with contextlib.suppress(NotFound), jobs_api(f"stop {job}"):  # never submitted: nothing to stop
                self.client.stop_job(job)

    def stop_waiting(self, spec: ClusterSpec, job: str, run_id: str) -> str | None:
        """A job held for capacity here is stopped; one Ray already runs is not (Ray has no precondition: its status
        is read right before the stop)."""
        if job in self.waiting and spec.region == self.waiting[job]:
            del self.waiting[job]
            return None
        found = self.job_status(None, job)
        if found is not None and found.get("jobStatus") != "PENDING":
            return f"its job is {found.get('jobStatus')} now"
        self.stop(spec, job)
        return None

    def waiting_for(self, cfg: RunConfig, run_id: str) -> Waiting:
        if cfg.cluster.region in self.no_capacity:
            what = "GPU capacity" if cfg.scaling.use_gpu else "capacity"
            return Waiting(f"no {what} in {cfg.cluster.region} (the local platform was told so: {NO_CAPACITY_ENV})")
        return Waiting()  # Ray's own job message says why locally; there are no pods

    def status_lag(self, spec: ClusterSpec, now: dt.datetime) -> str | None:
        return None  # no KubeRay here: Ray's own job status is read directly

    def ask_status(self, spec: ClusterSpec, now: dt.datetime) -> None:
        raise AssertionError("the local platform has no KubeRay status to ask about (status_lag is never set)")

    def disruptions(self, cfg: RunConfig, run_id: str, span: AttemptSpan) -> list[str]:
        """The run's worker nodes that exited without being asked to (a killed raylet, an OOM-killed node):
        the local stand-in for a preempted or vanished GKE node. Nodes this platform stops leave its list first."""
        group = group_name(run_id)
        with self.lock:
            replaced = [
                line for g, at, line in self.cluster.departed if g == group and (span.since is None or at >= span.since)
            ]
            node = self.cluster.groups.get(group)
            return replaced + ([self.cluster.death(node.service)] if node is not None and not node.alive else [])

    def worker_nodes(self, cfg: RunConfig, run_id: str) -> dict[str, NodeSeen]:
        with self.lock:
            node = self.cluster.groups.get(group_name(run_id))
            if node is None or not node.alive:
                return {}
            return {node.service.name: NodeSeen("local", f"pid/{node.service.proc.pid}")}

    def workers(self, spec: ClusterSpec, listed: object = None) -> Workers | None:
        """One RayCluster's worker groups; a group at zero is drained at once (its nodes were stopped, not asked to
        go)."""
        owner = key_path(spec)
        with self.lock:
            if self.cluster.head is None:
                return None
            if spec.region in self.no_capacity:
                starved = self.starved.get(owner)
                return None if starved is None else Workers(dict(starved), self.stamps[owner], self.generation)
            mine = {group: node for group, node in self.cluster.groups.items() if self.owner.get(group) == owner}
            if not mine and owner not in self.stamps:
                return None  # never sized: no RayCluster there
            # A node that died counts no more (as KubeRay's worker pods gone): the next sizing starts another.
            groups = {group: node.replicas if node and node.alive else 0 for group, node in mine.items()}
            drained = frozenset(group for group, node in mine.items() if node is None)
            return Workers(groups, self.stamps.get(owner, 0), self.generation, drained=drained)

    def scale(
        self, spec: ClusterSpec, workers: Workers, groups: dict[str, int], stamp: int, adopt: bool = False
    ) -> bool:
        with self.lock:
            if workers.handle != self.generation:
                return False
            self._scale_to(groups, spec)
            self.stamps[key_path(spec)] = stamp
            return True

    def delete_cluster(self, spec: ClusterSpec, workers: Workers) -> bool:
        """The idle teardown of one region's RayCluster: its groups go, and the head with the last of them (the next
        ensure_cluster starts a new one)."""
        owner = key_path(spec)
        with self.lock:
            if workers.handle != self.generation:
                return False
            self.stamps.pop(owner, None)
            self._scale_to({}, spec)
            self.starved.pop(owner, None)
            if not self.cluster.groups and not self.starved:
                self._stop_all()
            return True

    def ray_objects(self, spec: ClusterSpec) -> list[RayObject]:
        return []  # one process owns the local cluster and every job on it; the driver stops them at exit

    def shutdown(self) -> None:
        """Stop every node and the head; Ray's temp dir goes too."""
        with self.lock:
            self._stop_all()
            shutil.rmtree(self.cluster.ray_tmp, ignore_errors=True)

    def _stop_all(self) -> None:
        self._scale_to({})
        self.owner.clear()
        self.starved.clear()
        self.stamps.clear()
        self.waiting.clear()
        if self.cluster.head:
            self.cluster.stop_head()
            self._client = None
