"""The trainer's DataParallelTrainer is Ray's, less the datasets callback when no Ray Dataset is given: every
other default callback of the pinned Ray, in Ray's order (a Ray upgrade that changes them fails here, not in a
run). That training goes on without it is what every run of the trainer tier and of tests/e2e shows."""

from __future__ import annotations

from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from functions.core.config import RunConfig
from trainer.ray_trainer import DataParallelTrainerWithoutRayData
from trainer.torch_backend import TorchBackendConfig
from trainer.train import ray_train_configs


def default_callbacks(cls: type[DataParallelTrainer], tmp_path, **datasets) -> list[type]:
    cfg = RunConfig.model_validate({"scaling": {"nodes": 2, "gpus_per_node": 0}, "storage_path": str(tmp_path)})
    scaling, run = ray_train_configs(cfg, "r-1")
    trainer = cls(
        lambda config: None,
        backend_config=TorchBackendConfig.for_workers(False),
        scaling_config=scaling,
        run_config=run,
        datasets=datasets or None,
    )
    return [type(callback) for callback in trainer._create_default_callbacks()]


def test_without_ray_datasets_only_the_datasets_callback_is_left_out(tmp_path):
    rays = default_callbacks(DataParallelTrainer, tmp_path)
    assert DatasetsCallback in rays
    assert default_callbacks(DataParallelTrainerWithoutRayData, tmp_path) == [
        callback for callback in rays if callback is not DatasetsCallback
    ]


def test_a_trainer_given_ray_datasets_keeps_rays_callbacks(tmp_path):
    train = lambda: None  # noqa: E731 (a dataset factory, as Ray takes one)
    ours = default_callbacks(DataParallelTrainerWithoutRayData, tmp_path, train=train)
    assert DatasetsCallback in ours and ours == default_callbacks(DataParallelTrainer, tmp_path, train=train)
