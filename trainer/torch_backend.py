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
from typing import Any

from ray.train.backend import Backend, BackendConfig
from ray.train.v2._internal.util import TrainingFramework


def _ray_torch() -> Any:
    from ray.train.torch import config

    return config


class TorchBackend(Backend):
    """Ray's torch backend (ray.train.torch.config._TorchBackend), each hook imported when called."""

    share_cuda_visible_devices = True  # as Ray's: a node's workers see all its GPUs (NCCL needs them)

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        _ray_torch()._TorchBackend().on_start(worker_group, backend_config)

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
