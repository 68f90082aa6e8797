"""A cloud job's start, at small scale: how a run's nodes get the model's files (trainer/staging.py), played on
this machine with a Hub stand-in and fake-gcs-server, two nodes (two processes with their own local SSD, as
local rank 0 of two GKE nodes) fetching at once. Interleaved, each way `--repeats` times:

- hub every run: what every run did before, and still does for the first run of a revision (each node
  downloads from the Hub; here, the first node also stages a copy in the bucket);
- staged copy: a later run on new nodes (each node reads the bucket in parallel ranges);
- node cache: a later run on nodes that ran one (nothing is read).

The Hub stand-in serves at `--hub-mbps` (the Hub's per-connection rate to a cloud VM is the real bound; set 0 for
unbounded); fake-gcs-server is unbounded here, so its figures measure this machine's copy path, not a
region's network. Prints min / median / max wall and CPU seconds (the nodes' processes), and the bytes each
way took from the Hub.

    .venv/bin/python bench/model_start.py --size-mb 300 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REPO = "google/gemma-3-4b-it"
ON_NODE = """
import json, sys
from functions.core.config import ModelSpec
from trainer import staging
import time
started = time.monotonic()
found = staging.on_node(ModelSpec(id=sys.argv[1]), sys.argv[2], stages=sys.argv[3] == "1")
ready = time.monotonic() - started  # the node may train from here; staging goes on in the background
staging.finish()
print(json.dumps([*found, ready]))
"""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def nodes_fetch(hub_url: str, storage: str, homes: list[Path]) -> tuple[float, float, float, list[str]]:
    """Both nodes at once; (s until every node could load the model, wall s with the background staging, CPU s,
    where each node's files came from)."""
    cpu, started = children_cpu_s(), time.monotonic()
    procs = []
    for i, home in enumerate(homes):
        env = {
            **os.environ,
            "HF_HOME": str(home / "hf"),
            "HF_ENDPOINT": hub_url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HOME": str(home),
        }
        command = [sys.executable, "-c", ON_NODE, REPO, storage, "1" if i == 0 else "0"]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    origins, ready = [], 0.0
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(err[-3000:])
        _, origin, node_ready = json.loads(out.strip().splitlines()[-1])
        origins.append(origin)
        ready = max(ready, node_ready)
    return ready, time.monotonic() - started, children_cpu_s() - cpu, origins


def main(argv: list[str] | None = None) -> int:
    from functions.local import emulators
    from tests.fakes.hub_models import FakeModelHub

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=300, help="the model's weights, in two shards")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hub-mbps", type=float, default=100.0, help="the Hub's rate per connection, MB/s")
    args = parser.parse_args(argv)
    half = args.size_mb * 1024 * 1024 // 2
    files = {
        "config.json": json.dumps({"model_type": "gemma3"}).encode(),
        "model-00001-of-00002.safetensors": os.urandom(half),
        "model-00002-of-00002.safetensors": os.urandom(half),
        "tokenizer.json": b"{}",
    }
    scratch = Path(tempfile.mkdtemp(prefix="bench-model-"))
    gcs = emulators.fake_gcs(scratch / "fake-gcs.log")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
    from google.cloud import storage

    storage.Client().create_bucket("bench-models")
    hub = FakeModelHub(REPO, files, rate=args.hub_mbps * 1024 * 1024)
    results: dict[str, list[tuple[float, float, float, int]]] = {
        "hub every run": [],
        "staged copy": [],
        "node cache": [],
    }
    try:
        for repeat in range(args.repeats):
            order = list(results)
            order = order[repeat % 3 :] + order[: repeat % 3]
            # each way's own preconditions: a revision never staged, a staged one on new nodes, nodes that hold it
            stage = f"gs://bench-models/run-{repeat}-{uuid.uuid4().hex[:6]}"
            warm_nodes = [scratch / f"warm-{repeat}-{i}" for i in range(2)]
            nodes_fetch(hub.url, stage, warm_nodes)  # the revision staged, and these nodes hold it
            for way in order:
                homes = warm_nodes if way == "node cache" else [scratch / f"{way}-{repeat}-{i}" for i in range(2)]
                storage_path = f"gs://bench-models/cold-{uuid.uuid4().hex[:6]}" if way == "hub every run" else stage
                before = hub.served_bytes
                ready, wall, cpu, origins = nodes_fetch(hub.url, storage_path, homes)
                results[way].append((ready, wall, cpu, hub.served_bytes - before))
                print(
                    f"repeat {repeat + 1} {way}: ready {ready:.2f}s, {wall:.2f}s wall, {cpu:.2f}s CPU, {origins}",
                    flush=True,
                )
    finally:
        hub.shutdown()
        gcs.stop()
        shutil.rmtree(scratch, ignore_errors=True)  # every node's copy of the weights: GBs after a few repeats
    print(f"\n{args.size_mb} MB of weights, 2 nodes at once, {args.repeats} repeats, Hub at {args.hub_mbps} MB/s")
    print(
        "| way | files on every node, s (min / median / max) | with the background staging, s | CPU s | "
        "MB from the Hub |"
    )
    print("|---|---|---|---|---|")
    for way, samples in results.items():
        columns = [[sample[i] for sample in samples] for i in range(3)]
        cell = " | ".join(f"{min(v):.2f} / {statistics.median(v):.2f} / {max(v):.2f}" for v in columns)
        print(f"| {way} | {cell} | {statistics.median(sample[3] for sample in samples) / 2**20:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
