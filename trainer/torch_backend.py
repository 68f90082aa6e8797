"""Ray Train's torch backend, configured without importing torch in the driver.

`TorchTrainer` takes a `TorchConfig`, whose module imports torch: the driver paid that import (about 1.3 s of
its 2.3 s of imports here) before Ray Train's controller could start, on every run. `TorchBackendConfig` is
the same configuration (what `TorchTrainer` fills in: gloo on CPU, nccl on GPUs) for Ray's
`DataParallelTrainer`, and runs Ray's own torch backend's steps (`ray.train.torch.config`: the process group,
the CUDA device of each worker) in the workers, which import torch to train anyway; neither the driver nor Ray
Train's controller imports it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.train.backend import Backend, BackendConfig
from ray.train.v2._internal.util import TrainingFramework

logger = logging.getLogger(__name__)


def _ray_torch() -> Any:
    from ray.train.torch import config

    return config


# Linux hands out ports of ip_local_port_range (32768-60999 by default) to bind(0) and to outgoing connections.
EPHEMERAL = (32768, 60999)
RENDEZVOUS_PORTS = (20000, 32767)  # below them: no connection of any process takes one between choice and bind


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return EPHEMERAL


def rendezvous_address() -> tuple[str, int]:
    """Ray's get_address_and_port for the process group's rendezvous, but with a free port outside the ephemeral
    range. Ray finds a port with bind(0), closes it, and torch binds it later: on a busy machine an outgoing
    connection of any process could take it in between (seen: EADDRINUSE, two local runs at once)."""
    import random
    import socket

    import ray

    low, high = RENDEZVOUS_PORTS
    ephemeral = ephemeral_range()
    candidates = [p for p in random.sample(range(low, high + 1), 64) if not ephemeral[0] <= p <= ephemeral[1]]
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
        return ray.util.get_node_ip_address(), port
    from ray.train._internal.utils import get_address_and_port

    return get_address_and_port()  # nothing free there: Ray's own choice


def _on_worker(name: str, **kwargs: Any) -> Any:
    """Ray's worker-side torch function `name` (ray.train.torch.config), run where it is called: in a worker."""
    return getattr(_ray_torch(), name)(**kwargs)


def _worker_zero_address() -> tuple[str, int]:
    """Worker 0's rendezvous address, where torch's process groups are known to be built (Ray's check)."""
    import torch.distributed

    if not torch.distributed.is_available():
        raise RuntimeError("Distributed torch is not available.")
    return rendezvous_address()


def _set_rendezvous(addr: str, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)


class TorchBackend(Backend):
    """Ray's torch backend (ray.train.torch.config._TorchBackend) step for step, orchestrated from the controller
    without importing torch there (1.4 CPU-seconds of every run's controller): each step is Ray's own function,
    run in the workers, which import torch to train anyway. The rendezvous port is chosen outside the ephemeral
    range (rendezvous_address). tests/trainer/test_torch_backend.py plays both on one worker group."""

    share_cuda_visible_devices = True  # as Ray's: a node's workers see all its GPUs (NCCL needs them)

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        backend = getattr(backend_config, "backend", None)
        if backend is None:  # Ray's choice where none is given (TPUs are not a kind this trainer runs on)
            backend = "nccl" if worker_group.get_resources_per_worker().get("GPU", 0) > 0 else "gloo"
        master_addr, master_port = worker_group.execute_single(0, _worker_zero_address)
        init_method = getattr(backend_config, "init_method", "env")
        if init_method == "env":
            worker_group.execute(_set_rendezvous, addr=master_addr, port=master_port)
            url = "env://"
        elif init_method == "tcp":
            from ray._common.network_utils import build_address

            url = f"tcp://{build_address(master_addr, master_port)}"  # as Ray's: an IPv6 address in brackets
        else:
            raise ValueError(
                f"The provided init_method ({init_method}) is not supported. Must be either 'env' or 'tcp'."
            )
        if not _is_v1(worker_group):  # torch's LOCAL_RANK and the rest, before init_process_group
            worker_group.execute(_on_worker, "_set_torch_distributed_env_vars")
        timeout_s = getattr(backend_config, "timeout_s", 1800)
        import ray

        ray.get(
            [
                worker_group.execute_single_async(
                    rank,
                    _on_worker,
                    "_setup_torch_process_group",
                    backend=backend,
                    world_rank=rank,
                    world_size=len(worker_group),
                    init_method=url,
                    timeout_s=timeout_s,
                )
                for rank in range(len(worker_group))
            ]
        )

    def on_shutdown(self, worker_group: Any, backend_config: BackendConfig) -> None:
        import ray
        from ray._private import ray_constants
        from ray.exceptions import GetTimeoutError
        from ray.train import constants

        futures = worker_group.execute_async(_on_worker, "_shutdown_torch", destroy_process_group=len(worker_group) > 1)
        timeout_s = ray_constants.env_integer(
            constants.TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S, constants.DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S
        )
        try:
            ray.get(futures, timeout=timeout_s)
        except GetTimeoutError:
            logger.warning(f"Torch process group shutdown timed out after {timeout_s} seconds")

    def on_training_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        if _is_v1(worker_group):
            worker_group.execute(_on_worker, "_set_torch_distributed_env_vars")


def _is_v1(worker_group: Any) -> bool:
    from ray.train._internal.worker_group import WorkerGroup

    return isinstance(worker_group, WorkerGroup)


class TorchDeviceContext:
    """Around each worker's train function, as Ray's: the worker's CUDA device made the default one."""

    def __enter__(self) -> None:
        self._inner = _ray_torch().TorchConfigContextManager()
        self._inner.__enter__()

    def __exit__(self, *exc: object) -> bool:
        return bool(self._inner.__exit__(*exc))


@dataclass
class TorchBackendConfig(BackendConfig):
    """TorchConfig's fields and meaning (https://pytorch.org/docs/stable/distributed.html)."""

    backend: str = "gloo"  # nccl for GPU workers (TorchTrainer's choice when none is given)
    init_method: str = "env"
    timeout_s: int = 1800

    @classmethod
    def for_workers(cls, use_gpu: bool) -> TorchBackendConfig:
        return cls(backend="nccl" if use_gpu else "gloo")

    @property
    def backend_cls(self) -> type[Backend]:
        return TorchBackend

    @property
    def train_func_context(self) -> type[TorchDeviceContext]:
        return TorchDeviceContext

    @property
    def framework(self) -> TrainingFramework:
        return TrainingFramework.TORCH

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "init_method": self.init_method, "timeout_s": self.timeout_s}
