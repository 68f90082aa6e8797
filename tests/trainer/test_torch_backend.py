"""The driver configures Ray Train's torch backend without importing torch, and what it configures is Ray's
own: the same hooks, class settings, fields and defaults as TorchConfig and _TorchBackend of the pinned Ray (a
Ray upgrade that adds a hook or a field fails here, not in a run). That the process group forms through it is
what every multi-worker run of the trainer tier and of tests/e2e shows: their workers train under DDP."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest
from ray.train.backend import Backend
from ray.train.torch.config import TorchConfig, TorchConfigContextManager, _TorchBackend

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


def test_the_backend_is_rays_torch_backend_hook_for_hook():
    assert hooks(TorchBackend) == hooks(_TorchBackend) == {"on_start", "on_shutdown", "on_training_start"}
    for setting in ("share_cuda_visible_devices", "has_replica_groups"):
        assert getattr(TorchBackend, setting) == getattr(_TorchBackend, setting), setting


@pytest.mark.parametrize("use_gpu", [False, True])
def test_the_config_is_torch_configs_fields_and_the_backend_torch_trainer_picks(use_gpu):
    ours = TorchBackendConfig.for_workers(use_gpu)
    theirs = TorchConfig(backend="nccl" if use_gpu else "gloo")  # TorchTrainer's choice for these workers
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(TorchConfig)]
    assert ours.to_dict() == theirs.to_dict() and ours.framework == theirs.framework
    assert ours.backend_cls is TorchBackend and ours.train_func_context is TorchDeviceContext


def test_the_hooks_run_rays_own(monkeypatch):
    import ray.train.torch.config as ray_config

    monkeypatch.setattr(ray_config, "get_address_and_port", ray_config.get_address_and_port)  # on_start sets it
    called = []
    for hook in ("on_start", "on_shutdown", "on_training_start"):
        monkeypatch.setattr(_TorchBackend, hook, lambda self, group, config, hook=hook: called.append((hook, group)))
    backend, config = TorchBackend(), TorchBackendConfig()
    backend.on_start("group", config)
    backend.on_training_start("group", config)
    backend.on_shutdown("group", config)
    assert called == [("on_start", "group"), ("on_training_start", "group"), ("on_shutdown", "group")]
    entered = []
    monkeypatch.setattr(TorchConfigContextManager, "__enter__", lambda self: entered.append(True))
    with TorchDeviceContext():
        pass
    assert entered == [True]


def test_the_rendezvous_port_is_free_and_outside_the_ephemeral_range(monkeypatch):
    """Ray's on_start asks worker 0 for get_address_and_port (the module's name, which on_start replaces); the
    port comes from below the ephemeral range, where no outgoing connection can take it before torch binds it."""
    import ray.train.torch.config as ray_config

    from trainer import torch_backend

    assert "get_address_and_port" in inspect.getsource(_TorchBackend.on_start)
    monkeypatch.setattr("ray.util.get_node_ip_address", lambda: "127.0.0.1")
    low, high = torch_backend.ephemeral_range()
    for _ in range(20):
        address, port = torch_backend.rendezvous_address()
        assert address == "127.0.0.1" and not low <= port <= high and 20000 <= port <= 32767
    monkeypatch.setattr(_TorchBackend, "on_start", lambda self, group, config: None)
    monkeypatch.setattr(ray_config, "get_address_and_port", ray_config.get_address_and_port)
    TorchBackend().on_start("group", TorchBackendConfig())
    assert ray_config.get_address_and_port is torch_backend.rendezvous_address
