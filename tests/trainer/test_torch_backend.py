"""The driver configures Ray Train's torch backend without importing torch, and what it configures is Ray's
own: the same hooks, class settings, fields and defaults as TorchConfig and _TorchBackend of the pinned Ray (a
Ray upgrade that adds a hook or a field fails here, not in a run). That the process group forms through it is
what every multi-worker run of the trainer tier and of tests/e2e shows: their workers train under DDP."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from typing import Any

import pytest
from ray.train.backend import Backend

from trainer.torch_backend import TorchBackend, TorchBackendConfig, TorchDeviceContext


def test_the_driver_builds_its_trainer_without_torch(tmp_path):
    probe = f"""
import sys
from functions.core.config import RunConfig
from trainer.fit import ray_train_configs
from trainer.torch_backend import TorchBackendConfig
from trainer.ray_trainer import DataParallelTrainerWithoutHelpers
cfg = RunConfig.model_validate({{"scaling": {{"nodes": 2, "gpus_per_node": 0}}, "storage_path": {str(tmp_path)!r}}})
scaling, run = ray_train_configs(cfg, "r-1")
trainer = DataParallelTrainerWithoutHelpers(
    lambda config: None, train_loop_config={{}}, backend_config=TorchBackendConfig.for_workers(False),
    scaling_config=scaling, run_config=run,
)
trainer._get_train_func(), trainer._create_default_callbacks()  # what fit() builds before the controller starts
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]


def hooks(cls: type) -> set[str]:
    """The Backend hooks a class defines itself."""
    return {name for name, _ in inspect.getmembers(Backend, inspect.isfunction) if name in vars(cls)}


def rays() -> Any:
    """Ray's torch backend module, imported by the tests that compare with it (it imports torch, which the
    probes that import this module must not)."""
    from ray.train.torch import config

    return config


def test_the_backend_is_rays_torch_backend_hook_for_hook():
    _TorchBackend = rays()._TorchBackend
    assert hooks(TorchBackend) == hooks(_TorchBackend) == {"on_start", "on_shutdown", "on_training_start"}
    for setting in ("share_cuda_visible_devices", "has_replica_groups"):
        assert getattr(TorchBackend, setting) == getattr(_TorchBackend, setting), setting


@pytest.mark.parametrize("use_gpu", [False, True])
def test_the_config_is_torch_configs_fields_and_the_backend_torch_trainer_picks(use_gpu):
    ours = TorchBackendConfig.for_workers(use_gpu)
    theirs = rays().TorchConfig(backend="nccl" if use_gpu else "gloo")  # TorchTrainer's choice for these workers
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(rays().TorchConfig)]
    assert ours.to_dict() == theirs.to_dict() and ours.framework == theirs.framework
    assert ours.backend_cls is TorchBackend and ours.train_func_context is TorchDeviceContext


class RecordingGroup:
    """A v2 worker group of `size` workers that records each step a backend asks of them, by the Ray function
    the step runs (ours name Ray's by `_on_worker`), and runs none."""

    def __init__(self, size: int, gpus: int = 0) -> None:
        self.size, self.gpus, self.steps = size, gpus, []

    def __len__(self) -> int:
        return self.size

    def get_resources_per_worker(self) -> dict:
        return {"CPU": 1, "GPU": self.gpus}

    def _record(self, where, fn, args, kwargs):
        names = {"_worker_zero_address": "get_address_and_port", "_set_rendezvous": "set_env_vars"}
        name = args[0] if fn.__name__ == "_on_worker" else names.get(fn.__name__, fn.__name__)
        self.steps.append((where, name, kwargs))
        return ("10.0.0.1", 29500) if name == "get_address_and_port" else None

    def execute(self, fn, *args, **kwargs):
        return [self._record("all", fn, args, kwargs)]

    def execute_async(self, fn, *args, **kwargs):
        return [self._record("all", fn, args, kwargs)]

    def execute_single(self, rank, fn, *args, **kwargs):
        return self._record(rank, fn, args, kwargs)

    def execute_single_async(self, rank, fn, *args, **kwargs):
        return self._record(rank, fn, args, kwargs)


@pytest.mark.parametrize(
    "size, gpus, backend, init_method",
    [(1, 0, "gloo", "env"), (2, 0, "gloo", "tcp"), (2, 8, "nccl", "env"), (4, 8, None, "env")],
)
def test_each_hook_asks_the_workers_for_what_rays_asks_in_the_same_order(monkeypatch, size, gpus, backend, init_method):
    """Ray's _TorchBackend and ours, played on the same worker group: the same Ray functions run on the same
    workers with the same arguments, in the same order (the rendezvous function aside: ours picks its port)."""
    import ray

    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: refs)
    played = []
    for backend_cls, config in ((rays()._TorchBackend, rays().TorchConfig), (TorchBackend, TorchBackendConfig)):
        group = RecordingGroup(size, gpus)
        settings = config(backend=backend, init_method=init_method)
        for hook in ("on_start", "on_training_start", "on_shutdown"):
            getattr(backend_cls(), hook)(group, settings)
        played.append(group.steps)
    assert played[0] == played[1]
    assert [step[1] for step in played[0]][:2] == ["get_address_and_port", "set_env_vars"] or init_method == "tcp"


def test_ray_train_controller_sets_the_workers_up_without_torch():
    """What Ray Train's controller runs (the hooks, on a group of two) imports no torch: 1.4 CPU-seconds a run."""
    probe = """
import sys
import ray
ray.get = lambda refs, timeout=None: refs
from tests.trainer.test_torch_backend import RecordingGroup
from trainer.torch_backend import TorchBackend, TorchBackendConfig
group, config = RecordingGroup(2), TorchBackendConfig.for_workers(False)
for hook in ("on_start", "on_training_start", "on_shutdown"):
    getattr(TorchBackend(), hook)(group, config)
print(len(group.steps), sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "6 []", done.stdout[-2000:] + done.stderr[-2000:]


def test_the_device_context_is_rays(monkeypatch):
    entered = []
    monkeypatch.setattr(rays().TorchConfigContextManager, "__enter__", lambda self: entered.append(True))
    with TorchDeviceContext():
        pass
    assert entered == [True]


def test_the_rendezvous_port_is_free_and_outside_the_ephemeral_range(monkeypatch):
    """Ray's on_start asks worker 0 for get_address_and_port; ours for a port from below the ephemeral range,
    where no outgoing connection can take it before torch binds it."""
    from trainer import torch_backend

    assert "get_address_and_port" in inspect.getsource(rays()._TorchBackend.on_start)
    monkeypatch.setattr("ray.util.get_node_ip_address", lambda: "127.0.0.1")
    low, high = torch_backend.ephemeral_range()
    for _ in range(20):
        address, port = torch_backend.rendezvous_address()
        assert address == "127.0.0.1" and not low <= port <= high and 20000 <= port <= 32767
