"""Ray Train's DataParallelTrainer, less two helper actors this product's runs do not use.

Ray 2.60's trainer starts both for every run, each a process of its own on the driver's node that imports Ray
Train and Ray Data (pandas, pyarrow): 1.2-1.9 s of CPU each an attempt here, taken from the training workers on
a small machine, and on a local run (a new cluster each time) paid on every run.

- The DatasetManager, which hands Ray Datasets to the workers: the trainer reads its samples with Hugging Face
  datasets in each worker and gives Ray Train no Ray Dataset. Left out only when there is none.
- The AutoscalingCoordinator, which forwards the run's resource requests to Ray's autoscaler: no cluster of
  this product runs one (the controller sizes the worker groups, KubeRay's RayCluster has no in-tree
  autoscaler, the local head starts with --no-monitor), so the requests go nowhere. Left out for a fixed-size
  run, the only kind the trainer asks for.

The rest is Ray's own; tests/trainer/test_ray_trainer.py holds the pinned Ray to what is left out.
"""

from __future__ import annotations

from typing import Any

from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.execution.context import TrainRunContext
from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer


class FixedScalingWithoutAutoscaler(FixedScalingPolicy):
    """Ray's fixed-size policy (the same decisions), with no resource requests for an autoscaler."""

    def after_controller_start(self, train_run_context: TrainRunContext) -> None:
        pass  # Ray's starts the coordinator client, and with it the coordinator actor, here

    def _maybe_send_resource_request(self) -> None:
        pass

    def _send_resource_request(self) -> None:
        pass


class DataParallelTrainerWithoutHelpers(DataParallelTrainer):
    def _create_default_callbacks(self) -> list[Any]:
        callbacks = super()._create_default_callbacks()
        if self.datasets:
            return callbacks
        return [callback for callback in callbacks if not isinstance(callback, DatasetsCallback)]

    def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
        if type(controller_init_kwargs["scaling_policy"]) is FixedScalingPolicy:
            controller_init_kwargs["scaling_policy"] = FixedScalingWithoutAutoscaler(self.scaling_config)
        return super()._initialize_and_run_controller(**controller_init_kwargs)
