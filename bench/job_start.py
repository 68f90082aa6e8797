"""A cloud job's start, from the upload of its config to its first training step, measured where it can be measured
on this machine; the rest (node provisioning, image pull, the model's bytes over a node's network) is arithmetic
with its sources in docs/performance.md, "A cloud job's start".

--part control-plane: the real kube-apiserver and KubeRay operator of tests/realkube/ (RAYTUNE_REALKUBE: the
  unpacked ../shared/realkube/realkube-bin.tar.xz), the controller's launch handler over HTTP on fake-gcs-server.
  Each round uploads a 2-node run into a namespace of its own (a new RayCluster: head and workers), then a second
  run into the same namespace (the head is up: only its worker group is added). Timed from the upload: the launch
  handler's answer (RayCluster and RayJob applied, the record SUBMITTED), then what a 20 Hz poll of the API server
  sees the operator make (the head pod, the run's worker pods, the submitter Job) and what the node player makes
  of them (pods Running after its fake provisioning, the job submitted to the head's dashboard player): the
  player's times stand in for the cloud's and are not the cloud's.
--part trainer: the RayJob's entrypoint (python -m trainer.train, as KubeRay's submitter runs it) on a private
  local Ray of 2 worker nodes, the tiny Gemma 3 served as google/gemma-3-4b-it by a Hub stand-in, its storage on
  fake-gcs-server. A first run downloads it and stages a copy in the bucket; each round is then a new run that reads
  the staged copy, as every later cloud run does. Timed from the process start: each phase the job reports, and
  its first training step (the first progress line; logging every step).

    RAYTUNE_REALKUBE=/tmp/rk .venv/bin/python bench/job_start.py [--part control-plane|trainer|both] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
POLL_S = 0.05


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}" if values else "n/a"


def table(title: str, header: str, rows: list[tuple[str, list[float]]], unit: str = "s from the start") -> None:
    print(f"\n{title}\n\n| {header} | {unit} (min / median / max) |\n|---|---|")
    for label, values in rows:
        print(f"| {label} | {spread(values)} |")


# The control plane.


class NoEvents:
    """The harness's Pub/Sub: the bench publishes no run events (no emulator to start)."""

    def topic(self, name: str) -> None:
        return None

    def subscribe(self, topic: object) -> None:
        return None


def control_plane(repeats: int) -> None:
    import logging

    from kubernetes import client

    from functions.adapters.gcs import storage_client
    from functions.adapters.kube import Kube, api_client
    from functions.core.allocation import group_name
    from functions.core.policy import Policy
    from tests.fakes.http_events import post, storage_event
    from tests.harness import build_controller, serve_functions
    from tests.realkube.control_plane import ControlPlane, binaries
    from tests.realkube.session import KUBELET_ARGS

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the functions' access log
    folder = binaries()
    if folder is None:
        sys.exit("RAYTUNE_REALKUBE does not name the unpacked real Kubernetes binaries")
    started = time.monotonic()
    plane = ControlPlane(folder).start(kubelet_args=KUBELET_ARGS)
    print(f"control plane started in {time.monotonic() - started:.1f} s")
    bucket = f"bench-job-start-{uuid.uuid4().hex[:6]}"
    storage_client().create_bucket(bucket)
    api = api_client(plane.api, token=lambda: plane.token, ca_file=plane.ca)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    harness = build_controller(
        bucket,
        NoEvents(),
        lambda cluster: Kube(api_client(plane.api, token=lambda: plane.token, ca_file=plane.ca)),
        policy=Policy(namespaces=("rk-*",)),
        events_topic=None,
    )
    seen: dict[str, dict[str, list[float]]] = {"new RayCluster": {}, "head already up": {}}
    try:
        with serve_functions() as urls:
            for round_ in range(repeats):
                namespace = f"rk-bench-{round_}-{uuid.uuid4().hex[:4]}"
                plane.kubectl("create", "namespace", namespace)
                for case in seen:
                    name = f"{'first' if case == 'new RayCluster' else 'second'}-{round_}"
                    config = {"name": name, "scaling": {"nodes": 2}, "cluster": {"namespace": namespace}}
                    blob = storage_client().bucket(bucket).blob(f"configs/{name}.json")
                    blob.upload_from_string(json.dumps(config))
                    t0 = time.monotonic()
                    answered = post(urls["launch"], storage_event(bucket, blob.name, blob.generation))
                    assert answered.status_code == 200, answered.text
                    times = {"launch handler answered (RayCluster and RayJob applied)": time.monotonic() - t0}
                    [record] = [r for r in harness.ctx.store.active() if r.config and r.config["name"] == name]
                    group = group_name(record.run_id)
                    times |= follow(core, batch, plane, namespace, record.run_id, group, t0, case == "new RayCluster")
                    for what, value in times.items():
                        seen[case].setdefault(what, []).append(value)
                    print(f"round {round_ + 1}, {case}: " + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))
                plane.kubectl("delete", "namespace", namespace, "--wait=false")
    finally:
        plane.stop()
    for case, measured in seen.items():
        table(
            f"a 2-node run, {case}: {repeats} rounds, the real KubeRay operator, pods played by the node player",
            "from the upload of the config to",
            list(measured.items()),
        )


def follow(core, batch, plane, namespace: str, run_id: str, group: str, t0: float, new: bool) -> dict[str, float]:
    """When each step is first seen, from t0 (a 20 Hz poll; up to 120 s)."""
    steps: dict[str, float] = {}

    def mark(what: str, done: bool) -> None:
        if done and what not in steps:
            steps[what] = time.monotonic() - t0

    wanted = 5 if new else 4
    deadline = time.monotonic() + 120
    while len(steps) < wanted and time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace).items
        head = [p for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]
        workers = [p for p in pods if (p.metadata.labels or {}).get("ray.io/group") == group]
        if new:
            mark("head pod made (operator)", bool(head))
        mark("the run's 2 worker pods made (operator)", len(workers) >= 2)
        mark(
            "submitter Job made (operator)",
            any(j.metadata.name == run_id for j in batch.list_namespaced_job(namespace).items),
        )
        mark("head and workers Running (node player)", bool(head) and _running(head + workers) == 3)
        jobs = plane.jobs().get(f"{namespace}/gemma3-tuning-head-svc", {})
        mark("job submitted to the head's dashboard (player)", any(sid.startswith(run_id) for sid in jobs))
        time.sleep(POLL_S)
    return dict(sorted(steps.items(), key=lambda item: item[1]))


def _running(pods) -> int:
    return sum(1 for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp)


# The trainer.


def trainer(repeats: int) -> None:
    from functions.adapters.gcs import storage_client
    from functions.core.config import RunConfig
    from functions.core.result import PHASE_MARKER, PROGRESS_MARKER
    from tests.fakes.hub_models import FakeModelHub
    from tests.trainer.jobs import finish, start_job
    from trainer import tiny

    scratch = Path(tempfile.mkdtemp(prefix="bench-job-start-"))
    bucket = f"bench-job-start-{uuid.uuid4().hex[:6]}"
    storage_client().create_bucket(bucket)
    folder = tiny.save(scratch / "tiny")
    hub = FakeModelHub("google/gemma-3-4b-it", {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()})
    config = RunConfig.model_validate(
        {
            "name": "job-start",
            "model": {"id": "google/gemma-3-4b-it", "dtype": "float32", "quantization": "none"},
            "dataset": {"id": "tiny://products", "max_samples": 24},
            "training": {"max_steps": 2, "epochs": 1, "logging_steps": 1, "per_device_batch_size": 2},
            "scaling": {"nodes": 2, "gpus_per_node": 0, "max_failures": 0},
            "storage_path": f"gs://{bucket}/checkpoints",
        }
    )
    took: dict[str, list[float]] = {}  # each phase's own time
    reached: dict[str, list[float]] = {}  # from the process start
    try:
        for round_ in range(repeats + 1):  # the first stages the copy the others read
            run_id = f"job-start-{round_}"
            log = scratch / f"{run_id}.log"
            env = {
                "HF_ENDPOINT": hub.url,
                "HF_HOME": str(scratch / f"ssd-{round_}" / "hf"),  # a new pod's local SSD starts empty
                "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1",
            }
            t0 = time.monotonic()
            proc = start_job(config, run_id, log, env=env)
            stamped = tail(log, proc, t0)
            finish(proc, log)
            phases: dict[str, float] = {}
            first_step = None
            for at, line in stamped:  # rank 0's lines come through the driver, after Ray's "(RayTrainWorker ...)"
                if PHASE_MARKER in line:
                    phase = json.loads(line[line.index(PHASE_MARKER) + len(PHASE_MARKER) :])
                    if phase.get("seconds") is not None:
                        phases.setdefault(phase["phase"], phase["seconds"])
                elif PROGRESS_MARKER in line and first_step is None:
                    first_step = at
            exits = stamped[-1][0] if stamped else time.monotonic() - t0
            source = "staged copy" if "from the staged copy" in log.read_text() else "Hub"
            print(f"round {round_}: model from the {source}; first step at {first_step or 0:.2f} s")
            if round_ == 0:
                continue
            assert source == "staged copy" and first_step is not None, log.read_text()[-3000:]
            for phase, seconds in phases.items():
                took.setdefault(phase, []).append(seconds)
            reached.setdefault("first training step", []).append(first_step)
            reached.setdefault("the job's process exits", []).append(exits)
    finally:
        hub.shutdown()
    table(
        f"the RayJob's entrypoint, the tiny Gemma 3 from the staged copy, 2 worker nodes, {repeats} rounds: "
        "each phase's own time",
        "phase",
        list(took.items()),
        unit="s",
    )
    table(f"the same {repeats} rounds, from the job's process start", "to", list(reached.items()))


def tail(log: Path, proc, t0: float) -> list[tuple[float, str]]:
    """The log's lines as they come, each with when it was seen (from t0, at POLL_S)."""
    stamped: list[tuple[float, str]] = []
    offset, partial = 0, ""
    while True:
        alive = proc.poll() is None
        with log.open() as handle:
            handle.seek(offset)
            chunk = handle.read()
            offset = handle.tell()
        now = time.monotonic() - t0
        lines = (partial + chunk).split("\n")
        partial = lines.pop()
        stamped += [(now, line) for line in lines]
        if not alive:
            return stamped
        time.sleep(POLL_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("control-plane", "trainer", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    from functions.local import emulators

    gcs = emulators.fake_gcs(Path(tempfile.mkdtemp(prefix="bench-job-start-")) / "fake-gcs.log")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url  # one for both parts: the process keeps one storage client
    try:
        if args.part in ("control-plane", "both"):
            control_plane(args.repeats)
        if args.part in ("trainer", "both"):
            trainer(args.repeats)
    finally:
        gcs.stop()
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
