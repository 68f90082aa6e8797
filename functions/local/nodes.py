"""A local Ray node's process, as a pod is on GKE: one `ray start --block` with every port its own, started again
when a busy machine makes it miss its start, and stopped with the others at once, as KubeRay deletes pods; and
what a worker group's node stands for (its shape, its replicas, its GPU slices)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tenacity

from functions.core.errors import TransientError
from functions.local import emulators

WORKER_PORTS = 100  # ports for a node's worker processes (a 1-CPU node runs a handful)
START_TIMEOUT_S = 180
# `ray start` gives a node 30 s to register with the GCS (ray/_private/node.py, raylet_start_wait_time_s, not
# configurable); a machine busy enough can miss that once, and the node is then started again.
START_ATTEMPTS = 3
# A node's raylet and GCS drain for up to 10 s on SIGTERM; nothing in a local node outlives the run (its logs
# are copied before), so it gets a second, then SIGKILL. Within that second its raylet tells the GCS it leaves,
# so Ray stops counting its resources at once (as when KubeRay deletes a worker pod).
STOP_GRACE_S = 1.0
logger = logging.getLogger(__name__)
COMPONENTS = (
    "node-manager",
    "object-manager",
    "dashboard-agent-listen",
    "dashboard-agent-grpc",
    "runtime-env-agent",
    "metrics-export",
)  # the ports `ray start` takes one each of, given here so none collides with another node's


class NodeDidNotStart(TransientError):
    """A `ray start` exited or timed out before it said it was up, START_ATTEMPTS times: transient (a machine
    that busy may not be a minute later), so the submission is tried again on the next tick instead of failing
    the run."""


def _last_line(log: Path, since: int) -> str:
    lines = log.read_bytes()[since:].decode(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1].strip() if lines else "no output"


@dataclass(frozen=True)
class NodeShape:
    """One GKE worker pod's resources; a group's local node has `replicas` times them."""

    cpus: int
    gpus: int
    accelerator: str | None  # advertised, not enforced: a local GPU stands in for the config's type


@dataclass(frozen=True)
class GroupNode:
    """A worker group's local Ray node: it stands for `replicas` of the group's nodes."""

    service: emulators.Service
    replicas: int
    slots: tuple[int, ...]  # the GPU slices it holds, one a replica

    @property
    def alive(self) -> bool:
        return self.service.proc.poll() is None


def start(
    ray: str, args: list[str], env: dict[str, str], port: int, log: Path, taken: tuple[int, ...] = ()
) -> emulators.Service:
    """One `ray start --block` (`ray`: the CLI) with these arguments and environment, every port its own (none of
    `taken`, the ports `args` already name), ready once it says so in `log`; started again START_ATTEMPTS times."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(NodeDidNotStart),
        stop=tenacity.stop_after_attempt(START_ATTEMPTS),
        before_sleep=lambda state: logger.warning("%s; starting it again", state.outcome.exception()),
        reraise=True,
    )
    return retrying(_start_once, ray, args, env, port, log, taken)


def _start_once(
    ray: str, args: list[str], env: dict[str, str], port: int, log: Path, taken: tuple[int, ...]
) -> emulators.Service:
    since = log.stat().st_size if log.exists() else 0  # a retry appends to the log of the attempt before
    low, high = emulators.free_port_range(WORKER_PORTS, taken=(port, *taken))
    chosen = emulators.free_ports(len(COMPONENTS), taken=(port, *taken, *range(low, high + 1)))
    ports = [f"--{component}-port={number}" for component, number in zip(COMPONENTS, chosen, strict=True)]
    ports += [f"--min-worker-port={low}", f"--max-worker-port={high}"]
    command = [ray, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", *ports, *args]
    try:
        node = emulators.start(
            command,
            port,
            log,
            env=env,
            timeout_s=START_TIMEOUT_S,
            ready=lambda: "Ray runtime started" in log.read_bytes()[since:].decode(errors="replace"),
        )
    except (RuntimeError, TimeoutError):  # it exited, or never said it was up: say why, from its own log
        raise NodeDidNotStart(f"{log.stem} did not start ({_last_line(log, since)}; see {log})") from None
    node.name = log.stem
    return node


def stop_together(nodes: list[emulators.Service]) -> None:
    """Stop nodes at once, as KubeRay deletes pods: each `ray start --block` stops its raylet and workers on
    SIGTERM (about a second); nothing on a node outlives it (the job's logs are read on the head)."""
    with ThreadPoolExecutor(max_workers=max(len(nodes), 1), thread_name_prefix="ray-stop") as pool:
        list(pool.map(lambda node: node.stop(grace_s=STOP_GRACE_S), nodes))
