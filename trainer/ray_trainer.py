"""Ray Train's DataParallelTrainer, less the helper actors this product's runs do not use, and with its
placement-group cleaner told which cluster it is on.

Ray 2.60's trainer starts the two below for every run, each a process of its own on the driver's node that imports Ray
Train and Ray Data (pandas, pyarrow): 1.2-1.9 s of CPU each an attempt here, taken from the training workers on
a small machine, and on a local run (a new cluster each time) paid on every run.

- The DatasetManager, which hands Ray Datasets to the workers: the trainer reads its samples with Hugging Face
  datasets in each worker and gives Ray Train no Ray Dataset. Left out only when there is none.
- The AutoscalingCoordinator, which forwards the run's resource requests to Ray's autoscaler: no cluster of
  this product runs one (the controller sizes the worker groups, KubeRay's RayCluster has no in-tree
  autoscaler, the local head starts with --no-monitor), so the requests go nowhere. Left out for a fixed-size
  run, the only kind the trainer asks for.

The PlacementGroupCleaner is a detached actor that removes the run's placement group when Ray Train's controller
dies without doing so, as when Ray Tune stops a sweep's trial. A sweep's trials keep it; a run that is not a trial
leaves it out. Ray scopes a placement group to the job whose driver made it (the controller is the driver's
actor), and a run's driver ends with its fit(), so a dead controller's group goes with the job anyway: the cleaner
would be one more process for nothing, on every attempt. Where it runs, it asks Ray's State API whether the
controller lives. With no RAY_ADDRESS that API finds its cluster by looking for GCS processes on the machine, and
on a machine with another Ray it fails on every look ("Found multiple active Ray instances"): the dead trial's
placement group kept its CPUs and the next trial waited for them forever. So it is started with its own
cluster's address.

The rest is Ray's own; tests/trainer/test_ray_trainer.py holds the pinned Ray to what is left out.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray._common.constants import HEAD_NODE_RESOURCE_NAME
from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.context import TrainRunContext
from ray.train.v2._internal.execution.controller.placement_group_cleaner import PlacementGroupCleaner
from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

log = logging.getLogger(__name__)


class FixedScalingWithoutAutoscaler(FixedScalingPolicy):
    """Ray's fixed-size policy (the same decisions), with no resource requests for an autoscaler."""

    def after_controller_start(self, train_run_context: TrainRunContext) -> None:
        pass  # Ray's starts the coordinator client, and with it the coordinator actor, here

    def _maybe_send_resource_request(self) -> None:
        pass

    def _send_resource_request(self) -> None:
        pass


class CleanerOnItsCluster(PlacementGroupCleanerCallback):
    """Ray's callback as Ray starts it (placement_group_callback.py), its cleaner given RAY_ADDRESS, the GCS of
    the cluster it runs on."""

    def after_controller_start(self, train_run_context: TrainRunContext) -> None:
        context = ray.get_runtime_context()
        self._controller_actor_id = context.get_actor_id()
        try:
            self._cleaner = (
                ray.remote(num_cpus=0)(PlacementGroupCleaner)
                .options(
                    lifetime="detached",  # outlives the controller it watches
                    get_if_exists=False,
                    resources={HEAD_NODE_RESOURCE_NAME: 0.001},
                    scheduling_strategy="DEFAULT",
                    runtime_env={"env_vars": {"RAY_ADDRESS": context.gcs_address}},
                )
                .remote(
                    controller_actor_id=self._controller_actor_id,
                    check_interval_s=self._check_interval_s,
                    get_actor_timeout_s=self._get_actor_timeout_s,
                    stop_timeout=self._stop_timeout,
                )
            )
        except Exception as err:  # Ray's own: a run goes on without its cleaner
            log.warning("PlacementGroupCleaner not started (%s): a dead controller's placement group may stay", err)
            self._cleaner = None
            return
        self._cleaner.start_monitoring.remote()


class DataParallelTrainerWithoutHelpers(DataParallelTrainer):
    """`trial`: the run is a sweep's trial, whose job goes on after its controller ends (it keeps the cleaner)."""

    def __init__(self, *args: Any, trial: bool = False, **kwargs: Any) -> None:
        self.trial = trial
        super().__init__(*args, **kwargs)

    def _create_default_callbacks(self) -> list[Any]:
        callbacks = []
        for callback in super()._create_default_callbacks():
            if type(callback) is PlacementGroupCleanerCallback:
                if self.trial:
                    callbacks.append(CleanerOnItsCluster())
            elif self.datasets or not isinstance(callback, DatasetsCallback):
                callbacks.append(callback)
        return callbacks

    def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
        if type(controller_init_kwargs["scaling_policy"]) is FixedScalingPolicy:
            controller_init_kwargs["scaling_policy"] = FixedScalingWithoutAutoscaler(self.scaling_config)
        return super()._initialize_and_run_controller(**controller_init_kwargs)
