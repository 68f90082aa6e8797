"""Controller benchmark: cold import of main.py, and launch / watch handler latency with the number of
API calls each makes, on fake-gcs-server and the Kubernetes API fake (the same stand-ins as the tests).

    .venv/bin/python bench/controller.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cold_import(repeats: int) -> list[float]:
    probe = "import time; t = time.perf_counter(); import main; print(time.perf_counter() - t)"
    return [
        float(
            subprocess.run(
                [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.split()[-1]
        )
        for _ in range(repeats)
    ]


class CountingBlobs:
    """The run store's bucket, counting calls by operation."""

    def __init__(self, inner, counts: Counter):
        self.inner, self.counts = inner, counts

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def counted(*args, **kwargs):
            self.counts[f"gcs.{name}"] += 1
            return method(*args, **kwargs)

        return counted


def _upload(client, config: bytes, name: str):
    blob = client.bucket("bench-runs").blob(f"configs/{name}.json")
    blob.upload_from_string(config)
    return blob


def config_for(i: int) -> bytes:
    """1-node runs, 50 per RayCluster (max_worker_nodes 64): every run is admitted, none queues."""
    cluster = {"ray_cluster": f"bench-{i // 50}", "max_worker_nodes": 64}
    return json.dumps({"name": "bench", "scaling": {"nodes": 1}, "cluster": cluster}).encode()


def total_workers(kube) -> int:
    return sum(
        kube.get("rayclusters", name)["spec"]["workerGroupSpecs"][0]["replicas"] for name in kube.names("rayclusters")
    )


def tick_table(repeats: int, launch_one, tick, kube) -> None:
    """The watch tick as live runs grow (1, 10, 50, 100 RUNNING runs, nothing changing), and the scale-down
    delay after the last of them ends: the tick that sees it end (the trainer's notice triggers it at once)."""
    live = 0
    print(
        f"\n| live runs | quiet tick min / median / max (ms, {repeats} repeats) | last run ends: tick to 0 workers (ms) |"
    )
    print("|---|---|---|")
    for target in (1, 10, 50, 100):
        while live < target:
            launch_one(config_for(live), f"tick-{live}")
            live += 1
        for name in kube.names("rayjobs"):
            kube.set_status("rayjobs", name, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
        tick()  # records move to RUNNING once
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            tick()
            samples.append((time.perf_counter() - started) * 1000)
        print(f"| {target} | {min(samples):.0f} / {statistics.median(samples):.0f} / {max(samples):.0f} | ", end="")
        if target == 100:
            for name in kube.names("rayjobs"):
                kube.set_status("rayjobs", name, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
            started = time.perf_counter()
            tick()
            print(f"{(time.perf_counter() - started) * 1000:.0f} (workers left {total_workers(kube)}) |")
        else:
            print("- |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="launches to time")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each tick measurement")
    args = parser.parse_args()

    imports = cold_import(5)
    print(
        f"cold import of main.py: median {statistics.median(imports) * 1000:.0f} ms "
        f"(min {min(imports) * 1000:.0f}, max {max(imports) * 1000:.0f}; 5 fresh interpreters)"
    )

    import os

    from functions.adapters.gcs import Bucket, storage_client
    from functions.adapters.gke import GkeClusters, GkePlatform
    from functions.adapters.kube import Kube, api_client
    from functions.adapters.store import RunStore
    from functions.handlers.context import Context
    from functions.handlers.launch import handle as launch
    from functions.handlers.settings import Settings
    from functions.handlers.watch import handle as watch
    from functions.local import emulators
    from functions.local.cloudevents import message_published, object_finalized
    from tests.conftest import CLUSTER_PATH, PROJECT
    from tests.fakes.gke import FakeClusterManager
    from tests.fakes.kube import FakeKube

    workdir = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    gcs = emulators.fake_gcs(workdir / "fake-gcs.log")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
    kube = FakeKube().start()
    try:
        client = storage_client()
        client.create_bucket("bench-runs")
        counts: Counter = Counter()
        manager = FakeClusterManager()
        manager.add_running(CLUSTER_PATH)
        platform = GkePlatform(
            PROJECT,
            "hf_benchtoken000000000000000000",
            clusters=GkeClusters(PROJECT, client=manager),
            kube_factory=lambda cluster: Kube(api_client(kube.url)),
        )

        class NoPublish:
            def publish(self, topic, message, **attributes):
                counts["pubsub.publish"] += 1
                return "1"

        ctx = Context(
            settings=Settings(PROJECT, "bench-runs", None, "projects/bench/topics/events", 3600, None),
            store=RunStore(CountingBlobs(Bucket("bench-runs"), counts)),
            platform=platform,
            publisher=NoPublish(),
        )
        blobs = []
        for i in range(args.runs):
            blob = client.bucket("bench-runs").blob(f"configs/bench-{i}.json")
            blob.upload_from_string(config_for(i))
            blobs.append(blob)

        def upload_event(blob):
            return object_finalized("bench-runs", blob.name, blob.generation)

        def measure(call) -> tuple[float, Counter]:
            before_kube, before = len(kube.requests), Counter(counts)
            started = time.perf_counter()
            call()
            elapsed = time.perf_counter() - started
            delta = counts - before
            delta["kube"] = len(kube.requests) - before_kube
            return elapsed, delta

        # The first launch also builds clients and the GKE connection: reported apart.
        first, first_calls = measure(lambda: launch(upload_event(blobs[0]), ctx))
        samples = [measure(lambda b=b: launch(upload_event(b), ctx)) for b in blobs[1 : args.runs]]
        latencies = [s for s, _ in samples]
        calls = samples[-1][1]
        print(
            f"launch (upload -> SUBMITTED): first {first * 1000:.0f} ms; then median "
            f"{statistics.median(latencies) * 1000:.0f} ms, p90 {sorted(latencies)[int(0.9 * len(latencies))] * 1000:.0f} ms"
            f" over {len(latencies)}"
        )
        print(f"  API calls per launch: {dict(sorted(calls.items()))} (first: kube {first_calls['kube']})")
        duplicate, dup_calls = measure(lambda: launch(upload_event(blobs[1]), ctx))
        print(f"duplicate delivery: {duplicate * 1000:.0f} ms, API calls {dict(sorted(dup_calls.items()))}")

        tick = message_published({"kind": "tick"}, "t")
        for name in kube.names("rayjobs"):
            kube.set_status("rayjobs", name, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
        measure(lambda: watch(tick, ctx))  # records move to RUNNING once
        live = len(ctx.store.active())
        quiet, quiet_calls = measure(lambda: watch(tick, ctx))
        print(
            f"watch tick, {live} live runs, nothing changed: {quiet * 1000:.0f} ms, "
            f"API calls {dict(sorted(quiet_calls.items()))}"
        )
        ended = kube.names("rayjobs")
        for name in ended:
            kube.set_status("rayjobs", name, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
        finish, finish_calls = measure(lambda: watch(tick, ctx))
        print(
            f"watch tick, {len(ended)} runs ending at once (records, events, scale-down): {finish * 1000:.0f} ms, "
            f"API calls {dict(sorted(finish_calls.items()))}"
        )
        tick_table(
            args.repeats,
            lambda config, name: launch(upload_event(_upload(client, config, name)), ctx),
            lambda: watch(tick, ctx),
            kube,
        )
    finally:
        kube.stop()
        gcs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
