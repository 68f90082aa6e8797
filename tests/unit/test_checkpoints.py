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
