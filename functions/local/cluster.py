"""The processes of a local Ray cluster: its head (no CPUs for training, as on GKE) and, per worker group, one
local Ray node standing for all of the group's nodes. What they are, and starting and stopping them; which group
belongs to which RayCluster, and every question the controller asks, are LocalRay's (functions/local/platform.py).

Made for a fresh or a busy machine: the cluster has an auth token of its own (under the workdir, given to every
node and to the Jobs client; nothing from the home directory), every port is chosen free, and every process
carries the session's tag, so stopping the run stops exactly what it started.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from functions.core.result import TRIAL_DRIVER_RESOURCE, TRIAL_DRIVERS
from functions.local import emulators, nodes, session
from functions.local.nodes import GroupNode, NodeShape
from trainer.codehash import ROOT

# Ray Train's controller looks at its workers every 2 s by default, and the end of a run waits for several of
# those looks (the last report to fit() returning: 6.8 s). Four times a second costs a local run nothing it notices.
TRAIN_HEALTH_CHECK_INTERVAL_S = "0.25"


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


class LocalCluster:
    """One workdir's Ray cluster of local processes. Built without I/O; `claimed` makes or adopts one."""

    def __init__(
        self,
        workdir: Path,
        tag: str,
        ray_tmp: str,
        env: dict[str, str],
        head: emulators.Service | None = None,
        dashboard_port: int = 0,
        started: int = 0,
    ):
        """`env`: every process's environment on top of this one's; `started`: worker nodes started so far in the
        cluster's Ray folder (a warm one has those of earlier runs), each of which has a folder of its own."""
        self.workdir, self.tag, self.ray_tmp, self.env = workdir, tag, ray_tmp, env
        self.logs = workdir / "logs"
        self.ray = str(Path(sys.executable).parent / "ray")  # the ray CLI of this environment
        self.head, self.dashboard_port, self.started = head, dashboard_port, started
        self.shapes: dict[str, NodeShape] = {}  # each run's worker group: its nodes' shape
        self.groups: dict[str, GroupNode | None] = {}  # each run's worker group: its local node (None at zero)
        self.departed: list[tuple[str, dt.datetime, str]] = []  # nodes that died and were replaced: group, when, what
        self.timings: dict[str, float] = {}  # the cluster's own start and stop (raytune local --timings)

    @classmethod
    def claimed(cls, workdir: Path, tag: str, warm: session.WorkdirSession | None = None) -> LocalCluster:
        """The workdir's cluster, marked in use by this run (no warm_until: a keeper leaves it alone, and a run that
        dies leaves it to be stopped): the warm session's head adopted, else a new Ray folder; the Jobs client of
        this process given the cluster's token."""
        ray_tmp = warm.ray_tmp if warm else session.new_ray_tmp()
        session.write(workdir, replace(warm, warm_until=None) if warm else session.WorkdirSession(tag, ray_tmp))
        env = {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(auth_token(workdir)),
            "RAY_TMPDIR": ray_tmp,
            # What the cluster's processes make in the temp folder goes with the cluster, even a killed worker's.
            "TMPDIR": session.scratch(ray_tmp),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": str(ROOT),  # every process of the cluster imports this checkout's trainer
            # Ray Train's preemption watcher polls for the nodes GKE drains; a local node is never drained.
            "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": TRAIN_HEALTH_CHECK_INTERVAL_S,
            emulators.TAG: tag,
        }
        os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")})
        head, dashboard_port = None, 0
        if warm is not None and warm.head_pid and warm.head_port and warm.dashboard_port:
            head = emulators.Service(emulators.Adopted(warm.head_pid, tag), warm.head_port, "ray-head")
            dashboard_port = warm.dashboard_port
        started = len(list(Path(ray_tmp).glob("n[0-9]*")))
        return cls(workdir, tag, ray_tmp, env, head, dashboard_port, started)

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

    def start_head(self) -> None:
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
        session.write(self.workdir, self.session())

    def session(self) -> session.WorkdirSession:
        """The session as it stands: its head's pid and ports once it has one."""
        head = self.head
        return session.WorkdirSession(
            self.tag,
            self.ray_tmp,
            head.proc.pid if head else None,
            head.port if head else None,
            self.dashboard_port or None,
        )

    @property
    def head_alive(self) -> bool:
        return self.head is not None and self.head.proc.poll() is None

    @property
    def node_count(self) -> int:
        """The worker nodes the live groups stand for (the controller's count, as on GKE)."""
        return sum(node.replicas for node in self.groups.values() if node is not None and node.alive)

    def node_args(self, group: str, slots: tuple[int, ...]) -> tuple[list[str], dict[str, str]]:
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

    def start_group(self, group: str, replicas: int) -> None:
        """The local node standing for `replicas` of `group`'s nodes, with GPU slices no other node holds. A
        node that misses Ray's GCS registration on a busy machine is started again by _ray_start. Started in a
        thread: an interrupt while it starts lets the start finish and the node join its group, so stopping the
        cluster stops it."""
        assert self.head is not None, "the head starts before any worker"
        held = {slot for node in self.groups.values() if node is not None for slot in node.slots}
        slots = tuple(sorted(set(range(len(held) + replicas)) - held)[:replicas])
        args, env = self.node_args(group, slots)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-start")
        started = pool.submit(self._ray_start, args, env, self.head.port, f"ray-worker-{group}-{self.started}")
        try:
            started.result()
        finally:
            pool.shutdown(wait=True)
            if started.exception() is None:
                self.groups[group] = GroupNode(started.result(), replicas, slots)

    def stop_groups(self, groups: list[str]) -> None:
        """These groups' nodes stopped together, as KubeRay deletes pods; a node that had died is noted as
        departed (the local stand-in for a lost GKE node), and its process group stopped all the same."""
        leaving: list[emulators.Service] = []
        for group in groups:
            node = self.groups.get(group)
            if node is None:
                continue
            if not node.alive:
                self.departed.append((group, dt.datetime.now(dt.UTC), self.death(node.service)))
            leaving.append(node.service)
            self.groups[group] = None
        nodes.stop_together(leaving)

    def death(self, node: emulators.Service) -> str:
        return f"node {node.name} exited with {node.proc.returncode} (its log: {self.logs / node.name}.log)"

    def stop_head(self) -> None:
        if self.head:
            self.head.stop(grace_s=0)  # the last of the cluster: nothing is left to tell that it goes
            self.head = None
