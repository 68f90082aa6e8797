"""Right-sizing advice for a valid config: too few optimizer steps per epoch, or more Ray Train workers than
the dataset can feed. Warnings, not errors: they go into the run record and `raytune validate`."""

from __future__ import annotations

import math

from functions.core.config import RunConfig

# Training rows of datasets whose size is known without reading them (the split the defaults use).
KNOWN_ROWS = {"philschmid/amazon-product-descriptions-vlm": 1345}
MIN_STEPS_PER_EPOCH = 5  # "a handful": fewer and the run barely learns between evaluations


def right_sizing(cfg: RunConfig) -> list[str]:
    rows = cfg.dataset.max_samples or KNOWN_ROWS.get(cfg.dataset.id)
    if rows is None:
        return []  # unknown until the trainer reads it
    train = max(1, int(rows * (1 - cfg.dataset.eval_fraction)))
    t, s = cfg.training, cfg.scaling
    per_pass = s.num_workers * t.per_device_batch_size
    global_batch = per_pass * t.gradient_accumulation_steps
    steps = math.ceil(train / global_batch)
    found = []
    if per_pass > train:
        useful = max(1, train // t.per_device_batch_size)
        found.append(
            f"{s.num_workers} Ray Train workers x per_device_batch_size {t.per_device_batch_size} = {per_pass} samples "
            f"per step, more than the {train} training samples: at most {useful} workers get data; use fewer nodes or GPUs"
        )
    elif steps < MIN_STEPS_PER_EPOCH:
        found.append(
            f"{steps} optimizer steps per epoch ({train} training samples / global batch {global_batch} = "
            f"{s.num_workers} workers x {t.per_device_batch_size} x {t.gradient_accumulation_steps}): fewer than "
            f"{MIN_STEPS_PER_EPOCH}; lower the batch or accumulation, or use fewer nodes"
        )
    return found


def local_only(cfg: RunConfig) -> list[str]:
    """What in a config is the embedded local default's and would make a cloud run a toy or a failure: said when
    it is rendered or submitted for the cloud."""
    found = [
        f"{field} {value} is the local stand-in (built on the machine): a cloud run would fine-tune a toy"
        for field, value in (("model.id", cfg.model.id), ("dataset.id", cfg.dataset.id))
        if value.startswith("tiny://")
    ]
    if cfg.dataset.id.startswith("/"):
        found.append(f"dataset.id {cfg.dataset.id} is a path on the nodes' disk: a cloud run reads gs:// or the Hub")
    cluster = cfg.cluster
    if cluster.dependencies == "image" and (cluster.worker_image is None or cluster.head_image is None):
        found.append(
            f"cluster.dependencies is image but the stock {cluster.worker_image_ref} has none of the trainer's "
            "packages: build the trainer image (raytune image) and set cluster.worker_image and cluster.head_image"
        )
    return found
