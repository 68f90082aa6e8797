"""What Ray Train has registered of a run's checkpoints, read from its checkpoint manager's snapshot
(`checkpoint_manager_snapshot.json`, which it rewrites after each report): the point from which a test may kill
a job and expect its next attempt to resume."""

from __future__ import annotations

import json
from pathlib import Path


def registered_checkpoints(snapshot: Path) -> int:
    """How many checkpoints the snapshot lists (0: not written yet, or caught mid-write)."""
    try:
        return len(json.loads(snapshot.read_text())["checkpoint_results"])
    except (OSError, ValueError, KeyError):
        return 0
