"""README's main command: `raytune local` runs a fine-tune end to end on the embedded local default."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_local_run_end_to_end(tmp_path):
    out = subprocess.run(
        [str(Path(sys.executable).parent / "raytune"), "local", "examples/quickstart.json", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    text = out.stdout
    assert "is SUBMITTED" in text and "worker group: 2 nodes" in text
    assert ": RUNNING" in text and ": SUCCEEDED" in text
    assert "{'loss'" in text and "Checkpoint successfully created" in text
    assert "GPU workers 2 -> 0" in out.stderr and "worker group: 0 nodes" in text
    record = json.loads(text[text.index("\n{") + 1 :])
    assert record["state"] == "SUCCEEDED" and record["settled"]
    assert [h["state"] for h in record["history"]] == ["RECEIVED", "SUBMITTED", "RUNNING", "SUCCEEDED"]
    result = record["result"]
    # 32 samples, 8 held out for evaluation: 24 / (2 workers x batch 2) = 6 steps an epoch, 2 epochs.
    assert result["metrics"]["global_step"] == 12 and Path(result["adapter_path"], "adapter_config.json").exists()
    assert result["metrics"]["best_checkpoint_by"] == "eval_loss"
    assert all(Path(c).is_dir() for c in result["checkpoints"])
    assert "run-events" in text  # the run-finished event went out
