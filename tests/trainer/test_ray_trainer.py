"""The trainer's DataParallelTrainer is Ray's, less the datasets callback when no Ray Dataset is given, the
placement-group cleaner outside a sweep's trials and the autoscaler's resource requests of a fixed-size run: the
rest of the pinned Ray's defaults, in Ray's order, and
Ray's own scaling decisions (a Ray upgrade that changes either fails here, not in a run). That training goes on
without them is what every run of the trainer tier and of tests/e2e shows."""

from __future__ import annotations

import inspect

from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision, ScalingPolicy
from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from functions.core.config import RunConfig
from trainer.fit import ray_train_configs
from trainer.ray_trainer import CleanerOnItsCluster, DataParallelTrainerWithoutHelpers, FixedScalingWithoutAutoscaler
from trainer.torch_backend import TorchBackendConfig


def trainer(cls: type[DataParallelTrainer], tmp_path, trial: bool = False, **datasets) -> DataParallelTrainer:
    cfg = RunConfig.model_validate({"scaling": {"nodes": 2, "gpus_per_node": 0}, "storage_path": str(tmp_path)})
    scaling, run = ray_train_configs(cfg, "r-1")
    return cls(
        lambda config: None,
        backend_config=TorchBackendConfig.for_workers(False),
        scaling_config=scaling,
        run_config=run,
        datasets=datasets or None,
        **({"trial": True} if trial else {}),
    )


def default_callbacks(cls: type[DataParallelTrainer], tmp_path, trial: bool = False, **datasets) -> list[type]:
    """The default callbacks' types, ours counted as the Ray callback they stand for."""
    made = trainer(cls, tmp_path, trial, **datasets)._create_default_callbacks()
    return [PlacementGroupCleanerCallback if type(c) is CleanerOnItsCluster else type(c) for c in made]


def test_a_sweeps_trial_keeps_the_placement_group_cleaner_started_with_its_clusters_address(tmp_path):
    made = trainer(DataParallelTrainerWithoutHelpers, tmp_path, trial=True)._create_default_callbacks()
    assert [type(c) for c in made].count(CleanerOnItsCluster) == 1
    assert PlacementGroupCleanerCallback not in [type(c) for c in made]
    # Ours starts the cleaner as Ray's does, plus the address: an upgrade that changes Ray's fails here.
    rays = inspect.getsource(PlacementGroupCleanerCallback.after_controller_start)
    ours = inspect.getsource(CleanerOnItsCluster.after_controller_start)
    for option in (
        'lifetime="detached"',
        "get_if_exists=False",
        "HEAD_NODE_RESOURCE_NAME: 0.001",
        'scheduling_strategy="DEFAULT"',
        "start_monitoring.remote()",
        "ray.remote(num_cpus=0)",
    ):
        assert option in rays and option in ours, option
    assert "runtime_env" not in rays and '"RAY_ADDRESS": context.gcs_address' in ours


def test_without_ray_datasets_a_trial_leaves_out_only_the_datasets_callback_and_a_run_the_cleaner_too(tmp_path):
    rays = default_callbacks(DataParallelTrainer, tmp_path)
    assert DatasetsCallback in rays and PlacementGroupCleanerCallback in rays
    assert default_callbacks(DataParallelTrainerWithoutHelpers, tmp_path, trial=True) == [
        callback for callback in rays if callback is not DatasetsCallback
    ]
    assert default_callbacks(DataParallelTrainerWithoutHelpers, tmp_path) == [
        callback for callback in rays if callback not in (DatasetsCallback, PlacementGroupCleanerCallback)
    ]


def test_a_trial_given_ray_datasets_keeps_rays_callbacks(tmp_path):
    train = lambda: None  # noqa: E731 (a dataset factory, as Ray takes one)
    ours = default_callbacks(DataParallelTrainerWithoutHelpers, tmp_path, trial=True, train=train)
    assert DatasetsCallback in ours and ours == default_callbacks(DataParallelTrainer, tmp_path, train=train)


def test_the_controller_gets_the_fixed_policy_without_autoscaler_requests(tmp_path, monkeypatch):
    handed: dict = {}
    monkeypatch.setattr(DataParallelTrainer, "_initialize_and_run_controller", lambda self, **kw: handed.update(kw))
    ours = trainer(DataParallelTrainerWithoutHelpers, tmp_path)
    ours._initialize_and_run_controller(scaling_policy=FixedScalingPolicy(ours.scaling_config), callbacks=[])
    policy = handed["scaling_policy"]
    assert type(policy) is FixedScalingWithoutAutoscaler and policy.scaling_config is ours.scaling_config


def test_the_policy_decides_as_rays_and_never_starts_the_coordinator(tmp_path):
    scaling = trainer(DataParallelTrainer, tmp_path).scaling_config
    policy = FixedScalingWithoutAutoscaler(scaling)
    policy.after_controller_start(None)
    resize = policy.make_decision_for_non_running_worker_group()
    assert isinstance(resize, ResizeDecision) and resize.num_workers == scaling.num_workers == 2
    assert resize.resources_per_worker == scaling._resources_per_worker_not_none
    assert isinstance(policy.make_decision_for_running_worker_group(None, None), NoopDecision)
    policy.before_controller_abort()  # Ray's: cancels nothing when no request was sent
    assert policy._coordinator_client is None


def test_every_method_of_rays_policy_that_uses_the_coordinator_is_replaced_or_safe_without_it():
    replaced = {name for name, member in vars(FixedScalingWithoutAutoscaler).items() if inspect.isfunction(member)}
    assert replaced == {"after_controller_start", "_maybe_send_resource_request", "_send_resource_request"}
    # Ray's cancel is a no-op without a client; its coordinator property is used only by the replaced methods.
    safe = {"__init__", "_cancel_resource_request", "_autoscaling_coordinator"}
    using = set()
    for cls in (ScalingPolicy, FixedScalingPolicy):
        for name, member in vars(cls).items():
            code = member.fget if isinstance(member, property) else member
            if inspect.isfunction(code) and "_coordinator_client" in inspect.getsource(code):
                using.add(name)
    assert "_send_resource_request" in using and using - replaced - safe == set(), using
