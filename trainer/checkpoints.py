"""Which training checkpoints a run keeps: `training.keep_checkpoints` of them, the best by score and the
last always among them (the best is what to use, the last is what a resumed run starts from); and how often a
run that may lose its nodes checkpoints, beside its save strategy (docs/capacity.md, the arithmetic).

A Spot VM is preempted with a 30 s notice; Ray's workers get no reliable signal inside it, so a run on Spot
bounds its loss by checkpointing often enough instead: Young's interval sqrt(2 C M) between checkpoints (C: what
a checkpoint costs, M: the mean time between preemptions) minimises checkpoint time plus lost work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

# Compute Engine publishes no Spot preemption rate; six hours between preemptions of one node is the planning
# figure (a run on N nodes loses one N times as often). docs/capacity.md shows what the interval does with others.
SPOT_NODE_MTBF_S = 6 * 3600
# What a checkpoint writes per trainable parameter: the fp32 adapter weight and AdamW's two fp32 moments.
CHECKPOINT_BYTES_PER_PARAMETER = 12
# Sustained write of one checkpoint to GCS from a node (pyarrow's upload; bench/checkpoint.py measures it).
CHECKPOINT_WRITE_BYTES_PER_S = 200e6
CALIBRATION_STEPS = 5  # steps timed before the interval is fixed (the first ones include compilation)

T = TypeVar("T")


def to_delete(checkpoints: Sequence[tuple[T, float]], keep: int | None) -> list[T]:
    """`checkpoints` in the order they were written, each with its score (lower is better)."""
    if keep is None or len(checkpoints) <= keep:
        return []
    best = min(range(len(checkpoints)), key=lambda i: checkpoints[i][1])
    last = len(checkpoints) - 1
    kept = {best, last}
    by_score = sorted(range(len(checkpoints)), key=lambda i: checkpoints[i][1])
    for index in by_score:
        if len(kept) >= keep:
            break
        kept.add(index)
    return [checkpoint for i, (checkpoint, _) in enumerate(checkpoints) if i not in kept]


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Seconds between checkpoints that minimise expected checkpoint plus lost time (Young, 1974)."""
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def preemption_interval_steps(trainable_parameters: int, step_s: float, nodes: int) -> int:
    """Steps between checkpoints of a run on Spot nodes: Young's interval for its checkpoint size, with the
    run's own mean time to its first lost node (one node's over `nodes`), in steps of `step_s` seconds."""
    checkpoint_s = trainable_parameters * CHECKPOINT_BYTES_PER_PARAMETER / CHECKPOINT_WRITE_BYTES_PER_S
    interval = young_interval_s(checkpoint_s, SPOT_NODE_MTBF_S / max(1, nodes))
    return max(1, round(interval / max(step_s, 1e-3)))
