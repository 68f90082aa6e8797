"""training.keep_checkpoints: the best and the last always stay, then the next best up to the bound."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.checkpoints import to_delete


@pytest.mark.parametrize(
    ("scores", "keep", "deleted"),
    [
        ([3.0, 2.0, 1.0], None, []),
        ([3.0, 2.0, 1.0], 5, []),
        ([3.0, 2.0, 1.0], 1, ["c0", "c1"]),  # best is last: one is enough
        ([1.0, 2.0, 3.0], 1, ["c1"]),  # best and last both stay, over the bound of 1
        ([1.0, 2.0, 3.0, 0.5, 4.0], 3, ["c1", "c2"]),
    ],
)
def test_keep(scores, keep, deleted):
    assert to_delete([(f"c{i}", s) for i, s in enumerate(scores)], keep) == deleted


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=30), st.integers(1, 10))
def test_best_and_last_survive_and_the_bound_holds(scores, keep):
    checkpoints = [(i, s) for i, s in enumerate(scores)]
    gone = set(to_delete(checkpoints, keep))
    kept = [i for i, _ in checkpoints if i not in gone]
    assert len(checkpoints) - 1 in kept
    assert min(checkpoints, key=lambda c: c[1])[0] in kept
    assert min(keep, len(checkpoints)) <= len(kept) <= max(keep, 2)


def test_youngs_interval_balances_checkpoint_time_and_lost_work():
    from trainer.checkpoints import young_interval_s

    # C = 2.3 s (462 MB at 200 MB/s), M = 3 h (one of two nodes preempted every six hours): about 3.9 minutes
    assert round(young_interval_s(2.31, 3 * 3600)) == 223
    assert young_interval_s(8, 3600) == 2 * young_interval_s(2, 3600)  # it grows with the root of the cost


def test_spot_checkpoint_steps_from_the_adapters_size_step_time_and_nodes():
    from trainer.checkpoints import preemption_interval_steps

    # gemma-3-4b's all-linear LoRA r16 (38.5 M trainable parameters), 1.5 s a step, 2 nodes
    assert preemption_interval_steps(38_500_000, 1.5, 2) == 149
    assert preemption_interval_steps(38_500_000, 1.5, 8) == 74  # more nodes, more preemptions: more often
    assert preemption_interval_steps(1_000, 100.0, 1) == 1  # never less than every step
