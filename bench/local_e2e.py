"""`raytune local` end to end, as a user runs it: wall time of the quickstart (the shipped default), with
the phases a person waits through, over several runs. Each run gets a fresh workdir and a throwaway HOME.

    .venv/bin/python bench/local_e2e.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAYTUNE = str(Path(sys.executable).parent / "raytune")
STAMP = re.compile(r"^\[\s*([0-9.]+)s\] (.*)$")


def phases(stdout: str) -> dict[str, float]:
    """Seconds from start at which each phase began, read off the progress lines."""
    marks = {}
    for line in stdout.splitlines():
        match = STAMP.match(line)
        if not match:
            continue
        at, text = float(match.group(1)), match.group(2)
        if "is SUBMITTED" in text:
            marks.setdefault("submitted", at)
        elif "  step " in text:
            marks.setdefault("first step", at)
            marks["last step"] = at
        elif "scaled down" in text:
            marks.setdefault("scaled down", at)
    return marks


def one_run() -> dict:
    with tempfile.TemporaryDirectory() as workdir, tempfile.TemporaryDirectory() as home:
        started = time.monotonic()
        out = subprocess.run(
            [RAYTUNE, "local", "--workdir", workdir],
            capture_output=True,
            text=True,
            env={**os.environ, "HOME": home},
            cwd=home,
            timeout=900,
        )
        wall = time.monotonic() - started
        if out.returncode != 0:
            raise SystemExit(f"run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        record = json.loads(next((Path(workdir) / "records").glob("*.json")).read_text())
        return {"wall_s": wall, "train_s": record["result"]["metrics"]["train_runtime_seconds"], **phases(out.stdout)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    samples = []
    for i in range(args.runs):
        samples.append(one_run())
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in samples[-1].items()), flush=True)
    print(f"\n| measure (s) | min | median | max |  ({args.runs} runs, {os.cpu_count()} cores)\n|---|---|---|---|")
    for key in samples[0]:
        values = [s[key] for s in samples if key in s]
        print(f"| {key} | {min(values):.1f} | {statistics.median(values):.1f} | {max(values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
