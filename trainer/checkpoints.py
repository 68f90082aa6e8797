"""Which training checkpoints a run keeps: `training.keep_checkpoints` of them, the best by score and the
last always among them (the best is what to use, the last is what a resumed run starts from)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

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
