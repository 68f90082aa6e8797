"""Right-sizing warnings: too few optimizer steps per epoch, more workers than the data can feed."""

import pytest

from functions.core.advice import right_sizing
from functions.core.config import RunConfig

pytestmark = pytest.mark.unit


def cfg(**sections) -> RunConfig:
    return RunConfig.model_validate(sections)


def test_the_defaults_on_the_reference_dataset_are_right_sized():
    assert right_sizing(cfg()) == []  # 1,345 samples / 64 = 22 steps an epoch


def test_too_few_steps_per_epoch():
    [warning] = right_sizing(cfg(dataset={"max_samples": 200}))
    assert warning.startswith("4 optimizer steps per epoch (200 training samples / global batch 64")


def test_more_workers_than_samples():
    [warning] = right_sizing(cfg(dataset={"max_samples": 100}, scaling={"nodes": 4}))
    assert "more than the 100 training samples: at most 25 workers get data" in warning


def test_unknown_dataset_size_gives_no_advice():
    assert right_sizing(cfg(dataset={"id": "someone/other-dataset"})) == []


def test_the_collator_runs_in_dataloader_workers_on_gpu():
    assert cfg().training.loader_workers(use_gpu=True) == 4
    assert cfg().training.loader_workers(use_gpu=False) == 0  # CPU runs: in-process (tests, tiny model)
    assert cfg(training={"dataloader_workers": 8}).training.loader_workers(use_gpu=True) == 8
