"""What a narrow terminal keeps of `raytune runs` (issue 67): a column with nothing in it (cost, always "-" on the
local default) goes before one that says something (duration, the best eval loss)."""

from __future__ import annotations

import pytest

from functions.cli.ops import fitting

pytestmark = pytest.mark.unit

COLUMNS = (
    "run id", "name", "state", "age", "duration", "nodes x GPUs", "capacity", "best eval loss", "GPU node-h",
    "est. cost", "cost",
)  # fmt: skip
LOCAL = ["quickstart-3f9c2e71a0", "quickstart", "SUCCEEDED", "2m", "58s", "2 x CPU", "-", "6.1607", "-", "-", "-"]


def test_at_80_columns_the_empty_columns_go_first_and_duration_and_loss_stay():
    shown = fitting(COLUMNS, [LOCAL, LOCAL], 80)
    assert "duration" in shown and "best eval loss" in shown, shown
    assert not {"cost", "est. cost", "GPU node-h", "capacity"} & set(shown), shown
    assert {"run id", "state"} <= set(shown)


def test_a_wide_terminal_shows_everything_and_cells_decide_only_when_it_must():
    assert fitting(COLUMNS, [LOCAL], 300) == list(COLUMNS)
    priced = [*LOCAL[:8], "0.03", "$1.20-$2.40", "$1.80"]
    assert "cost" in fitting(COLUMNS, [priced], 130)
