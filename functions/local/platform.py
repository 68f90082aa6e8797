"""The local Platform: a Ray cluster of local processes (a head without CPUs for training, as on GKE,
plus a worker group per run that scales up for the run and back to zero after it, like the RayCluster's GPU
groups), the RayJob a Ray Jobs API submission of the trainer entrypoint.

A worker group of N nodes is one local Ray node with the resources of N (N x the CPUs, GPUs and units of the
group's resource that each of its GKE pods has): the controller sizes, scales and drains it as it does the
RayCluster's group, Ray Train places one worker per unit as on GKE, and a local run pays one node's start and
upkeep (its `ray start`, raylet and agents: about 4 s of CPU and 1-2 s of wall a node here) instead of N.

Made for a fresh or a busy machine: the cluster has an auth token of its own (under the workdir, given
to every node and to the Jobs client; nothing from the home directory), every port is chosen free, and
every process carries a tag, so stopping the run stops exactly what it started.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from functions.core import joblog, manifests
from functions.core.allocation import group_name, key_path
from functions.core.config import ClusterSpec, RunConfig
from functions.core.errors import NotFound, PermanentError, TransientError, from_status
from functions.core.platform import ClusterReadiness, NodeSeen, RayObject, Waiting, Workers
from functions.core.result import TRIAL_DRIVER_RESOURCE, TRIAL_DRIVERS, WORKER_RESOURCE_ENV
from functions.local import emulators, nodes, session
from functions.local.nodes import GroupNode, NodeShape
from functions.local.workdirs import mlflow_store
from trainer.codehash import ROOT, code_files, code_sha256

JOB_DEPLOYMENT = {
    "PENDING": "Initializing",
    "RUNNING": "Running",
    "SUCCEEDED": "Complete",
    "STOPPED": "Complete",
    "FAILED": "Failed",
}
# Ray Train's controller looks at its workers every 2 s by default, and the end of a run waits for several of
# those looks (the last report to fit() returning: 6.8 s). Four times a second costs a local run nothing it notices.
TRAIN_HEALTH_CHECK_INTERVAL_S = "0.25"
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


def auth_token(workdir: Path) -> Path:
    """The local cluster's Ray auth token, made once per workdir, readable by its owner alone (mode 0600, one made
    by an earlier release or by hand included)."""
    path = workdir / "ray-auth-token"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    elif path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return path


def live_driver_log(workdir: Path, run_id: str) -> Path | None:
    """A local job's driver log in Ray's session folder, the file the Jobs API serves (copied to logs/ when
    the run ends). Any Ray session of the workdir's cluster: an idle teardown and a new head start another."""
    current = session.read(workdir)
    if current is None:
        return None
    found = Path(current.ray_tmp).glob(f"session_2*/logs/job-driver-{run_id}.log")
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


class LocalRay:
    """Platform on a Ray cluster of local processes, driven through the Ray Jobs API."""

    def __init__(
        self,
        workdir: Path,
        tag: str,
        gpus: int | None = None,
        no_capacity: Collection[str] = (),
        warm: session.Session | None = None,
    ):
        """`warm`: the session whose head an earlier clean run left warm (session.warm), attached to instead of
        starting a head; its tag is `tag`."""
        self.workdir = workdir
        # Regions where GPUs never come (the local stand-in for GKE out of stock there): a run's group there is
        # sized but never started, and its job waits, as a RayJob whose worker pods stay Pending.
        self.no_capacity = frozenset(no_capacity)
        self.logs = workdir / "logs"
        self.tag = tag
        self.gpus = machine_gpus() if gpus is None else gpus
        self.ray_tmp = warm.ray_tmp if warm else session.new_ray_tmp()
        # In use from here (no warm_until): a keeper leaves it alone, and a run that dies leaves it to be stopped.
        session.write(workdir, replace(warm, warm_until=None) if warm else session.Session(tag, self.ray_tmp))
        self.env = {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(auth_token(workdir)),
            "RAY_TMPDIR": self.ray_tmp,
            # What the cluster's processes make in the temp folder goes with the cluster, even a killed worker's.
            "TMPDIR": session.scratch(self.ray_tmp),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": str(ROOT),  # every process of the cluster imports this checkout's trainer
            # Ray Train's preemption watcher polls for the nodes GKE drains; a local node is never drained.
            "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": TRAIN_HEALTH_CHECK_INTERVAL_S,
            emulators.TAG: tag,
        }
        # The Jobs client in this process authenticates with the same token.
        os.environ.update({k: self.env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")})
        self.ray = str(Path(sys.executable).parent / "ray")  # the ray CLI of this environment
        self.head: emulators.Service | None = None
        self.dashboard_port = 0
        if warm is not None and warm.head_pid and warm.head_port and warm.dashboard_port:
            self.head = emulators.Service(emulators.Adopted(warm.head_pid, tag), warm.head_port, "ray-head")
            self.dashboard_port = warm.dashboard_port
        self.shapes: dict[str, NodeShape] = {}  # each run's worker group: its nodes' shape
        self.groups: dict[str, GroupNode | None] = {}  # each run's worker group: its local node (None at zero)
        # Every region's RayCluster is this one Ray cluster: each group belongs to one of them (its allocation's
        # key_path), so sizing one region's RayCluster never touches another's groups.
        self.owner: dict[str, str] = {}
        self.starved: dict[str, dict[str, int]] = {}  # a RayCluster in a region without capacity: its groups' sizes
        self.waiting: dict[str, str] = {}  # jobs applied there, never started: job -> region
        self.stamps: dict[str, int] = {}  # each RayCluster's allocation version its groups were last sized for
        self.departed: list[tuple[str, dt.datetime, str]] = []  # nodes that died and were replaced: group, when, what
        # worker nodes started so far in the cluster's Ray folder (a warm one has those of earlier runs): each gets a
        # folder of its own
        self.started = len(list(Path(self.ray_tmp).glob("n[0-9]*")))
        self.generation = 0  # bumped on every scale: the precondition size()/scale() check
        self.lock = threading.RLock()
        self._client: Any = None
        self._code_sha256: str | None = None
        self.timings: dict[str, float] = {}  # the cluster's own start and stop (raytune local --timings)

    @contextlib.contextmanager
    def timed(self, what: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.timings[what] = round(self.timings.get(what, 0.0) + time.monotonic() - started, 2)

    def _ray_start(
        self, args: list[str], env: dict[str, str], port: int, name: str, taken: tuple[int, ...] = ()
    ) -> emulators.Service:
        """One node of this cluster (nodes.start), its log logs/<name>.log."""
        return nodes.start(self.ray, args, {**self.env, **env}, port, self.logs / f"{name}.log", taken)

    def ensure_cluster(self, cfg: RunConfig) -> ClusterReadiness:
        with self.lock:
            if self.head is None:
                with self.timed("starting the Ray head"):
                    self._start_head()
        return ClusterReadiness("ready")

    def _start_head(self) -> None:
        port, self.dashboard_port, client_port = emulators.free_ports(3)
        self.head = self._ray_start(
            [
                "--head",
                f"--port={port}",
                "--num-cpus=0",
                f"--resources={json.dumps({TRIAL_DRIVER_RESOURCE: TRIAL_DRIVERS})}",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={client_port}",
                f"--temp-dir={self.ray_tmp}",
                "--no-monitor",  # Ray's autoscaler: the controller sizes the local cluster, as KubeRay's on GKE
            ],
            {},
            port,
            "ray-head",
            taken=(self.dashboard_port, client_port),
        )
        emulators.wait_until(lambda: emulators.port_open(self.dashboard_port), "dashboard up", 120)
        session.write(self.workdir, self._session())

    def _session(self) -> session.Session:
        """The session as it stands: its head's pid and ports once it has one."""
        head = self.head
        return session.Session(
            self.tag,
            self.ray_tmp,
            head.proc.pid if head else None,
            head.port if head else None,
            self.dashboard_port or None,
        )

    def left_warm(self) -> session.Session | None:
        """At a clean end: every worker group stopped, the head left running for the next run of the workdir; the
        session to keep warm, or None without a live head."""
        with self.lock:
            self._scale_to({})
            if self.head is None or self.head.proc.poll() is not None:
                return None
            return self._session()

    @property
    def client(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        with self.lock:
            if self._client is None:
                self._client = JobSubmissionClient(f"http://127.0.0.1:{self.dashboard_port}")
            return self._client

    @property
    def node_count(self) -> int:
        """The worker nodes the live groups stand for (the controller's count, as on GKE)."""
        return sum(node.replicas for node in self.groups.values() if node is not None and node.alive)

    def _node_args(self, group: str, slots: tuple[int, ...]) -> tuple[list[str], dict[str, str]]:
        """The local node of `group` standing for len(`slots`) of its nodes: their resources together, the
        group's own resource (one unit per training worker, as on GKE: functions/core/manifests.py worker_group)
        and, on a GPU machine, their GPU slices (Ray would otherwise give every local node the same devices)."""
        assert self.head is not None, "the head starts before any worker"
        shape, replicas = self.shapes[group], len(slots)
        self.started += 1
        args = [
            f"--address=127.0.0.1:{self.head.port}",
            f"--num-cpus={shape.cpus * replicas}",
            f"--num-gpus={shape.gpus * replicas}",
            # A Ray folder of its own (under the cluster's, short: socket paths are length-limited): Ray names a
            # node's sockets `raylet`, `raylet.1`, ... by looking which exist, so two nodes started at once in one
            # folder take the same name and the second never registers with the GCS (its 30 s time-out).
            f"--temp-dir={self.ray_tmp}/n{self.started}",
        ]
        env = {}
        if shape.gpus:
            devices = [d for slot in slots for d in range(slot * shape.gpus, (slot + 1) * shape.gpus)]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        resources = {group: (shape.gpus or 1) * replicas}
        if shape.accelerator:
            resources[f"accelerator_type:{shape.accelerator}"] = 1
        args.append(f"--resources={json.dumps(resources)}")
        return args, env

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
        mine = {g: node for g, node in self.groups.items() if owner is None or self.owner.get(g) == owner}
        leaving: list[emulators.Service] = []
        for group, node in mine.items():
            replicas = groups.get(group, 0)
            if node is None or (node.alive and node.replicas == replicas):
                continue
            if not node.alive:
                self.departed.append((group, dt.datetime.now(dt.UTC), self._death(node.service)))
            leaving.append(node.service)  # a dead node's process group may have left something: stop() takes it
            self.groups[group] = None
        nodes.stop_together(leaving)
        for group in [g for g in mine if g not in groups]:
            del self.groups[group]
            self.owner.pop(group, None)
        for group, replicas in groups.items():
            if owner is not None:
                self.owner[group] = owner
            if self.groups.get(group) is None and replicas > 0:
                with self.timed("starting worker nodes"):
                    self._start_group_node(group, replicas)
            self.groups.setdefault(group, None)
        self.generation += 1

    def _start_group_node(self, group: str, replicas: int) -> None:
        """The local node standing for `replicas` of `group`'s nodes, with GPU slices no other node holds. A
        node that misses Ray's GCS registration on a busy machine is started again by _ray_start. Started in a
        thread: an interrupt while it starts lets the start finish and the node join its group, so stopping the
        cluster stops it."""
        assert self.head is not None, "the head starts before any worker"
        held = {slot for node in self.groups.values() if node is not None for slot in node.slots}
        slots = tuple(sorted(set(range(len(held) + replicas)) - held)[:replicas])
        args, env = self._node_args(group, slots)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-start")
        started = pool.submit(self._ray_start, args, env, self.head.port, f"ray-worker-{group}-{self.started}")
        try:
            started.result()
        finally:
            pool.shutdown(wait=True)
            if started.exception() is None:
                self.groups[group] = GroupNode(started.result(), replicas, slots)

    def size(self, cfg: RunConfig, run_id: str, workers: Workers | None, groups: dict[str, int], stamp: int) -> bool:
        scaling = cfg.scaling
        if scaling.use_gpu:
            check_fits(cfg, self.gpus)
        with self.lock:
            if self.head is None or (workers is not None and workers.handle != self.generation):
                return False
            self.shapes[group_name(run_id)] = NodeShape(
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
            "RAY_ADDRESS": f"127.0.0.1:{self.head.port}" if self.head else "",
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
        if self.head is None:
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
        if self.head is not None:
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

    def disruptions(
        self,
        cfg: RunConfig,
        run_id: str,
        since: dt.datetime | None,
        nodes: Mapping[str, str] | None = None,
        until: dt.datetime | None = None,
    ) -> list[str]:
        """The run's worker nodes that exited without being asked to (a killed raylet, an OOM-killed node):
        the local stand-in for a preempted or vanished GKE node. Nodes this platform stops leave its list first."""
        group = group_name(run_id)
        with self.lock:
            replaced = [line for g, at, line in self.departed if g == group and (since is None or at >= since)]
            node = self.groups.get(group)
            return replaced + ([self._death(node.service)] if node is not None and not node.alive else [])

    def worker_nodes(self, cfg: RunConfig, run_id: str) -> dict[str, NodeSeen]:
        with self.lock:
            node = self.groups.get(group_name(run_id))
            if node is None or not node.alive:
                return {}
            return {node.service.name: NodeSeen("local", f"pid/{node.service.proc.pid}")}

    def _death(self, node: emulators.Service) -> str:
        return f"node {node.name} exited with {node.proc.returncode} (its log: {self.logs / node.name}.log)"

    def workers(self, spec: ClusterSpec, listed: object = None) -> Workers | None:
        """One RayCluster's worker groups; a group at zero is drained at once (its nodes were stopped, not asked to
        go)."""
        owner = key_path(spec)
        with self.lock:
            if self.head is None:
                return None
            if spec.region in self.no_capacity:
                starved = self.starved.get(owner)
                return None if starved is None else Workers(dict(starved), self.stamps[owner], self.generation)
            mine = {group: node for group, node in self.groups.items() if self.owner.get(group) == owner}
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
            if not self.groups and not self.starved:
                self._stop_all()
            return True

    def ray_objects(self, spec: ClusterSpec) -> list[RayObject]:
        return []  # one process owns the local cluster and every job on it; the driver stops them at exit

    def shutdown(self) -> None:
        """Stop every node and the head; Ray's temp dir goes too."""
        with self.lock:
            self._stop_all()
            shutil.rmtree(self.ray_tmp, ignore_errors=True)

    def _stop_all(self) -> None:
        self._scale_to({})
        self.owner.clear()
        self.starved.clear()
        self.stamps.clear()
        self.waiting.clear()
        if self.head:
            self.head.stop(grace_s=0)  # the last of the cluster: nothing is left to tell that it goes
            self.head = None
            self._client = None
