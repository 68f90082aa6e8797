"""Controller benchmark: the launch handler and the watch tick of this checkout against another version of it
(`--against DIR`: a checkout, e.g. `git worktree add /tmp/before <commit>`), interleaved in one run.

Each version runs in a process of its own (`--serve ROOT`) with its own fake-gcs-server and Kubernetes API fake
(the stand-ins of the tests), each of those in a process of its own as the real services are: the parent asks each
version in turn to launch the next run or to time a tick, so load on the machine falls on both alike. Reported per
version: wall and CPU time of the controller's process and the API calls it makes.

    .venv/bin/python bench/controller.py --against /tmp/before [--sizes 1,10,100,1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.managers import BaseManager
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
RUNS_PER_RAYCLUSTER = 50


def cold_import(root: Path) -> float:
    probe = "import time; t = time.perf_counter(); import main; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


# The served side: one version's controller on its own emulators.


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


class KubeHost:
    """The Kubernetes API fake, kept in a process of its own (multiprocessing's manager): its serving is not the
    controller's CPU, as an API server's is not. Methods return plain data, which is what crosses the processes."""

    def __init__(self, root: str):
        sys.path.insert(0, root)
        from tests.fakes.kube import FakeKube

        self.kube = FakeKube().start()

    def url(self) -> str:
        return self.kube.url

    def requests(self) -> int:
        return len(self.kube.requests)

    def names(self, plural: str) -> list[str]:
        return list(self.kube.names(plural))

    def get(self, plural: str, name: str) -> dict | None:
        return self.kube.get(plural, name)

    def set_status(self, plural: str, name: str, status: dict) -> None:
        self.kube.set_status(plural, name, status)

    def put(self, plural: str, obj: dict, namespace: str = "default") -> None:
        self.kube.put(plural, obj, namespace)

    def stop(self) -> None:
        self.kube.stop()


def config_for(i: int) -> bytes:
    """1-node runs, 50 per RayCluster (max_worker_nodes 64): every run is admitted, none queues."""
    cluster = {"ray_cluster": f"bench-{i // RUNS_PER_RAYCLUSTER}", "max_worker_nodes": 64}
    return json.dumps({"name": "bench", "scaling": {"nodes": 1}, "cluster": cluster}).encode()


class Host(BaseManager):
    pass


Host.register("KubeHost", KubeHost)


def serve(root: Path) -> None:
    # The same fake (this checkout's) for every version, its process forked before a version's code is imported.
    host = Host()
    host.start()
    kube = host.KubeHost(str(ROOT))  # type: ignore[attr-defined]
    kube_url = kube.url()
    sys.path.insert(0, str(root))
    from functions.adapters.gcs import Bucket, storage_client
    from functions.adapters.gke import GkePlatform

    try:
        from functions.adapters.gke_clusters import GkeClusters
    except ImportError:  # a version from before adapters/gke_clusters.py (b716476 and older)
        from functions.adapters.gke import GkeClusters  # type: ignore[attr-defined,no-redef]
    from functions.adapters.kube import Kube, api_client
    from functions.adapters.store import RunStore
    from functions.core.manifests import owner_id
    from functions.handlers.context import Context
    from functions.handlers.launch import handle as launch
    from functions.handlers.settings import Settings
    from functions.handlers.watch import handle as watch
    from functions.local import emulators
    from functions.local.cloudevents import message_published, object_finalized

    try:
        from tests.harness import CLUSTER_PATH, PROJECT
    except ImportError:  # a version from before tests/harness.py
        from tests.conftest import CLUSTER_PATH, PROJECT
    from tests.fakes.gke import FakeClusterManager

    assert Path(sys.modules["functions"].__file__ or "").is_relative_to(root), "the other version's code"
    scratch = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    gcs = emulators.fake_gcs(scratch / "fake-gcs.log")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
    client = storage_client()
    client.create_bucket("bench-runs")
    counts: Counter = Counter()
    manager = FakeClusterManager()
    manager.add_running(CLUSTER_PATH)

    class NoPublish:
        def publish(self, topic, message, **attributes):
            counts["pubsub.publish"] += 1
            return "1"

    def instance() -> Context:
        """A function instance: its clients, its record cache and its connection to the cluster all new."""
        platform = GkePlatform(
            PROJECT,
            "hf_benchtoken000000000000000000",
            clusters=GkeClusters(PROJECT, client=manager),
            kube_factory=lambda cluster: Kube(api_client(kube_url)),
            owner=owner_id("bench-runs"),
        )
        return Context(
            settings=Settings(PROJECT, "bench-runs", None, "projects/bench/topics/events", 3600, None),
            store=RunStore(CountingBlobs(Bucket("bench-runs"), counts)),
            platform=platform,
            publisher=NoPublish(),
        )

    ctx = instance()
    tick = message_published({"kind": "tick"}, "t")
    launched = 0

    def measured(call) -> dict:
        before_kube, before = kube.requests(), Counter(counts)
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        result = {"wall_ms": (time.perf_counter() - wall) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000}
        calls = counts - before
        calls["kube"] = kube.requests() - before_kube
        return {**result, "calls": dict(calls)}

    profilers: dict = {}

    def profiled(what: str, call) -> dict:
        """`call` measured; with BENCH_PROFILE=PATH also profiled, its cProfile stats written to
        PATH.<what>.<the version's folder name>."""
        if not os.environ.get("BENCH_PROFILE"):
            return measured(call)
        import cProfile

        profiler = profilers.setdefault(what, cProfile.Profile())
        profiler.enable()
        try:
            return measured(call)
        finally:
            profiler.disable()
            # One file per version served (each is a process of its own): PATH.<what>.<its folder's name>
            profiler.dump_stats(f"{os.environ['BENCH_PROFILE']}.{what}.{root.name}")

    def launch_next() -> dict:
        nonlocal launched
        blob = client.bucket("bench-runs").blob(f"configs/bench-{launched}.json")
        blob.upload_from_string(config_for(launched))
        launched += 1
        return profiled("launch", lambda: launch(object_finalized("bench-runs", blob.name, blob.generation), ctx))

    def running() -> None:
        """Every job RUNNING on a node of its own, as KubeRay and the kubelet would report it."""
        for name in kube.names("rayjobs"):
            job = kube.get("rayjobs", name)
            if (job.get("status") or {}).get("jobStatus") == "RUNNING":
                continue
            kube.set_status("rayjobs", name, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
            run_id = job["metadata"]["labels"]["raytune.dev/run-id"]
            node = f"node-{name}"[:60]
            kube.put("nodes", {"metadata": {"name": node, "labels": {"cloud.google.com/gke-spot": "true"}}}, "")
            pod = {"metadata": {"name": f"{name}-w"[:60], "labels": {"raytune.dev/run-id": run_id}}}
            kube.put("pods", {**pod, "spec": {"nodeName": node}, "status": {"phase": "Running"}})
        for name in kube.names("rayclusters"):
            # KubeRay calls a RayCluster ready once its pods run (and never takes it back): a cluster whose jobs
            # run has been ready.
            kube.set_status("rayclusters", name, {"state": "ready"})
        watch(tick, ctx)  # records move to RUNNING and learn their nodes once
        watch(tick, ctx)

    def end_all() -> dict:
        for name in kube.names("rayjobs"):
            kube.set_status("rayjobs", name, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
        return measured(lambda: watch(tick, ctx))

    def cold() -> dict:
        """A tick by a fresh instance (a new one, or the record cache's periodic re-read): every record read.
        The instance it replaces is collected first: a fresh instance is a new process, with no other's garbage
        (an instance's objects are in reference cycles, so they wait for a full collection, which would otherwise
        fall in some of the ticks timed and not in others)."""
        nonlocal ctx
        ctx = instance()
        gc.collect()
        return profiled("cold", lambda: watch(tick, ctx))

    def quiet() -> dict:
        """A tick of a warm instance. A full collection goes first, as before a cold tick: the instance's objects
        are in reference cycles, and a collection of the 1,000 runs' garbage (about 150 ms here) fell in some ticks
        and not in others, and more often in the version served first, which read as a regression of that version."""
        gc.collect()
        return profiled("tick", lambda: watch(tick, ctx))

    actions = {
        "cold": cold,
        "launch": launch_next,
        "running": lambda: running() or {},
        "tick": quiet,
        "end": end_all,
    }
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            print(json.dumps(actions[line.strip()]()), flush=True)
    finally:
        kube.stop()
        host.shutdown()
        gcs.stop()
        shutil.rmtree(scratch, ignore_errors=True)


# The parent: both versions side by side.


class Served:
    def __init__(self, label: str, root: Path):
        self.label = label
        self.process = subprocess.Popen(
            [sys.executable, str(HERE), "--serve", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=root,
        )
        assert json.loads(self.ask(None))["ready"]

    def ask(self, what: str | None) -> str:
        assert self.process.stdin and self.process.stdout
        if what is not None:
            self.process.stdin.write(what + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the served controller exited")
        return line

    def do(self, what: str) -> dict:
        return json.loads(self.ask(what))

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def spread(values: list[float]) -> str:
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f}"


def calls_text(calls: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(calls.items())) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="a checkout of the version to compare with")
    parser.add_argument("--sizes", default="1,10,100,1000", help="live runs at which the tick is timed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve.resolve())
        return 0
    versions = [("this", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    print(f"versions: {', '.join(f'{label} = {root}' for label, root in versions)}; {os.cpu_count()} cores, ", end="")
    print(f"load average {os.getloadavg()[0]:.2f} at the start")

    imports: dict[str, list[float]] = {label: [] for label, _ in versions}
    for round_ in range(args.repeats):
        for label, root in versions[round_ % len(versions) :] + versions[: round_ % len(versions)]:
            imports[label].append(cold_import(root) * 1000)
    print("\n| version | cold import of main.py, ms (min / median / max) |\n|---|---|")
    for label, _ in versions:
        print(f"| {label} | {spread(imports[label])} |")

    served = [Served(label, root) for label, root in versions]
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        launches: dict[str, list[dict]] = {s.label: [] for s in served}
        ticks: dict[tuple[str, int], list[dict]] = {}
        colds: dict[tuple[str, int], list[dict]] = {}
        live = 0
        for size in sizes:
            while live < size:
                for one in served[live % len(served) :] + served[: live % len(served)]:
                    launches[one.label].append(one.do("launch") | {"at": live})
                live += 1
            for one in served:
                one.do("running")
            for round_ in range(args.repeats):
                for one in served[round_ % len(served) :] + served[: round_ % len(served)]:
                    ticks.setdefault((one.label, size), []).append(one.do("tick"))
                for one in served[round_ % len(served) :] + served[: round_ % len(served)]:
                    colds.setdefault((one.label, size), []).append(one.do("cold"))
        ends = {one.label: one.do("end") for one in served}
    finally:
        for one in served:
            one.close()

    print(
        "\n| version | launch, upload to SUBMITTED: wall ms (min / median / max) | CPU ms | "
        "API calls of the last launch | of the first |\n|---|---|---|---|---|"
    )
    for label, seen in launches.items():
        later = seen[1:]  # the first also builds the clients and the GKE connection
        print(
            f"| {label} | {spread([s['wall_ms'] for s in later])} | {spread([s['cpu_ms'] for s in later])} | "
            f"{calls_text(later[-1]['calls'])} (run {later[-1]['at'] + 1}) | {calls_text(seen[0]['calls'])} |"
        )
    for what, samples in (("quiet tick", ticks), ("cold tick (a fresh instance)", colds)):
        print(
            f"\n| live runs | version | {what} wall ms (min / median / max, {args.repeats} repeats) | CPU ms | "
            "API calls per tick |\n|---|---|---|---|---|"
        )
        for size in sizes:
            for one in served:
                seen = samples[(one.label, size)]
                print(
                    f"| {size} | {one.label} | {spread([s['wall_ms'] for s in seen])} | "
                    f"{spread([s['cpu_ms'] for s in seen])} | {calls_text(seen[-1]['calls'])} |"
                )
    print("\n| version | all runs end: the tick that records, publishes and scales down, wall ms | API calls |")
    print("|---|---|---|")
    for label, end in ends.items():
        print(f"| {label} | {end['wall_ms']:.0f} | {calls_text(end['calls'])} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
