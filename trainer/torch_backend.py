"""Ray Train's torch backend, configured without importing torch in the driver.

`TorchTrainer` takes a `TorchConfig`, whose module imports torch: the driver paid that import (about 1.3 s of
its 2.3 s of imports here) before Ray Train's controller could start, on every run. `TorchBackendConfig` is
the same configuration (what `TorchTrainer` fills in: gloo on CPU, nccl on GPUs) for Ray's
`DataParallelTrainer`, and runs Ray's own torch backend (`ray.train.torch.config`: the process group, the
CUDA device of each worker), imported where it runs: in the controller when it sets the workers up and in
the workers, which import torch to train anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.train.backend import Backend, BackendConfig
from ray.train.v2._internal.util import TrainingFramework


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


class TorchBackend(Backend):
    """Ray's torch backend (ray.train.torch.config._TorchBackend), each hook imported when called; the rendezvous
    port is chosen outside the ephemeral range (rendezvous_address), the rest is Ray's."""

    share_cuda_visible_devices = True  # as Ray's: a node's workers see all its GPUs (NCCL needs them)

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        config = _ray_torch()
        config.get_address_and_port = rendezvous_address  # what Ray's on_start runs on worker 0 (a guard test)
        config._TorchBackend().on_start(worker_group, backend_config)

    def on_shutdown(self, worker_group: Any, backend_config: BackendConfig) -> None:
        _ray_torch()._TorchBackend().on_shutdown(worker_group, backend_config)

    def on_training_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        _ray_torch()._TorchBackend().on_training_start(worker_group, backend_config)


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
