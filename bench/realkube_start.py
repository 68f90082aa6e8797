"""How reliably and how fast the contract tier's real control plane starts (tests/realkube/control_plane.py:
etcd, kube-apiserver, kube-controller-manager, the KubeRay CRDs and operator, the players), started and stopped
N times in a row while other processes keep every core busy, as a loaded CI machine does. Prints each start's
time or its failure (with what the failing command said), then min / median / max.

    RAYTUNE_REALKUBE=<unpacked ../shared/realkube/realkube-bin.tar.xz> .venv/bin/python bench/realkube_start.py \\
        [--runs 10] [--busy N (default: one per core)]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> int:
    from tests.realkube.control_plane import ControlPlane, binaries
    from tests.realkube.session import KUBELET_ARGS

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    folder = binaries()
    if folder is None:
        print("RAYTUNE_REALKUBE does not name the unpacked binaries", file=sys.stderr)
        return 2
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=burn, args=(stop,), daemon=True) for _ in range(args.busy)]
    for burner in burners:
        burner.start()
    times, failures = [], 0
    try:
        for run in range(1, args.runs + 1):
            plane = ControlPlane(folder)
            started = time.monotonic()
            try:
                plane.start(kubelet_args=KUBELET_ARGS)
                times.append(time.monotonic() - started)
                print(f"start {run}: {times[-1]:.1f} s", flush=True)
            except Exception as exc:
                failures += 1
                print(f"start {run}: FAILED after {time.monotonic() - started:.1f} s: {exc}", flush=True)
            finally:
                plane.stop()
    finally:
        stop.set()
        for burner in burners:
            burner.join()
    load = os.getloadavg()[0]
    if times:
        print(f"the control plane started and stopped {args.runs} times beside {args.busy} busy processes")
        print("| started | failed | start s (min / median / max) | load |")
        print("|---|---|---|---|")
        print(
            f"| {len(times)} of {args.runs} | {failures} | "
            f"{min(times):.1f} / {statistics.median(times):.1f} / {max(times):.1f} | {load:.1f} |"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
