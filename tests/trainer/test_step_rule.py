"""The estimate's samples follow the rule the trainer's steps are set by: Hugging Face's Trainer
(set_initial_training_values, the real method, given the run's arguments and a rank's batches), for any dataset
size, batch, accumulation, worker count, epochs and max_steps. A sweep or `submit --max-cost` priced on epochs while
its trials ran to max_steps was the hole (issue 53)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from functions.core.config import TrainingSpec
from functions.core.estimate import trained_samples


class TrainerAsConfigured:
    """What set_initial_training_values asks of its Trainer besides the arguments: the global batch (per-device
    batch x accumulation x the data-parallel workers), no sequence parallelism, and the rows each rank's loader
    walks (DistributedSampler: the whole dataset, split between ranks)."""

    def __init__(self, batch: int, accumulation: int, workers: int, rows: int):
        self.total, self.rows = batch * accumulation * workers, rows

    def get_total_train_batch_size(self, args) -> int:
        return self.total

    def get_sp_size(self) -> int:
        return 1

    def num_examples(self, dataloader) -> int:
        return self.rows


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 20_000),
    batch=st.integers(1, 8),
    accumulation=st.integers(1, 8),
    workers=st.integers(1, 32),
    epochs=st.floats(0.25, 6, allow_nan=False),
    max_steps=st.one_of(st.none(), st.integers(1, 5_000)),
)
def test_the_estimates_samples_are_the_trainers(
    tmp_path_factory, rows, batch, accumulation, workers, epochs, max_steps
):
    from transformers import Trainer, TrainingArguments

    training = TrainingSpec(
        epochs=epochs, max_steps=max_steps, per_device_batch_size=batch, gradient_accumulation_steps=accumulation
    )
    args = TrainingArguments(
        output_dir=str(tmp_path_factory.mktemp("args")),
        num_train_epochs=epochs,
        max_steps=max_steps or -1,  # as trainer/worker.py passes it
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        report_to=[],
    )
    a_ranks_batches = list(range(math.ceil(rows / (batch * workers))))
    trainer = TrainerAsConfigured(batch, accumulation, workers, rows)
    values = Trainer.set_initial_training_values(trainer, args, a_ranks_batches)  # type: ignore[arg-type]
    assert trained_samples(rows, training, workers) == round(values[3])  # num_train_samples
