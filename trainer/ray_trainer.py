"""Ray Train's DataParallelTrainer, less the Ray Data helper a run without Ray Datasets does not use.

The trainer reads its samples with Hugging Face datasets in each worker and gives Ray Train no Ray Dataset. Ray
2.60's trainer still adds its datasets callback, which starts a DatasetManager actor for every attempt: a process
of its own on the driver's node that imports Ray Data (pandas, pyarrow) to manage nothing, 1.4-1.9 s of CPU an
attempt here, taken from the training workers on a small machine. This trainer leaves that one callback out
when there are no Ray Datasets; the rest is Ray's own (tests/trainer/test_ray_trainer.py holds it to that).
"""

from __future__ import annotations

from typing import Any

from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer


class DataParallelTrainerWithoutRayData(DataParallelTrainer):
    def _create_default_callbacks(self) -> list[Any]:
        callbacks = super()._create_default_callbacks()
        if self.datasets:
            return callbacks
        return [callback for callback in callbacks if not isinstance(callback, DatasetsCallback)]
