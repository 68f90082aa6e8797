"""bench/controller.py runs end to end, small: its served side imports what the tests provide (a moved helper once
broke it without any test noticing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_controller_bench_prints_every_table():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "controller.py"), "--sizes", "1,2", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for table in ("cold import of main.py", "launch, upload to SUBMITTED", "quiet tick", "cold tick", "all runs end"):
        assert table in out, table
    quiet = [line for line in out.splitlines() if line.startswith("| 2 | this |")]
    assert len(quiet) == 2 and all("gcs.listing 2" in line for line in quiet), quiet
