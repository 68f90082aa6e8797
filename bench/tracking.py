"""What tracking costs a training step, and what a tracker that is down or slow costs.

1. A step's cost: the Trainer's log event through the tracking callback (trainer/tracking.py), for no tracking
   and for an MLflow logger whose server is up (a real `mlflow server`), down (connection refused), failing
   slowly (503 after 5 s) and slow but answering (the real server behind a proxy that holds every answer 1 s),
   and a Vertex AI logger (google-cloud-aiplatform's client against tests/fakes/vertex.py): how long opening
   the run held the start, the microseconds a log event takes in the training process, and the end's wait
   (bounded at 30 s, here 5 s) with what was not delivered.
2. A run's training phase: the quickstart on the embedded local default (a warm head), tracking off and on (the
   real MLflow server), interleaved, the phase's seconds as the run's result.json times it.

    .venv/bin/python bench/publish.py tracking -- .venv/bin/python bench/tracking.py --repeats 5
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from functions.core.config import RunConfig  # noqa: E402
from functions.local import emulators  # noqa: E402
from tests.fakes.http import serve_in_thread  # noqa: E402
from tests.fakes.vertex import FakeVertex  # noqa: E402
from tests.mlflow_server import start as start_mlflow  # noqa: E402
from trainer import trackers, tracking  # noqa: E402

EVENTS = 200  # log events a repeat (a 2,000-step run at logging_steps 10)
RAYTUNE = str(Path(sys.executable).parent / "raytune")
TRAINING = "training on 28 samples"


class Delayed(http.server.BaseHTTPRequestHandler):
    """The real server's answers, each held back 1 s: a tracker that is slow but works."""

    upstream = ""

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(1.0)
        request = urllib.request.Request(
            self.upstream + self.path,
            data=body if self.command != "GET" else None,
            method=self.command,
            headers={"Content-Type": self.headers.get("Content-Type") or "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, data = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            status, data = refused.code, refused.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _forward

    def log_message(self, *args: Any) -> None:
        pass


def delayed(uri: str) -> str:
    handler = type("ToUpstream", (Delayed,), {"upstream": uri})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


class Slow(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        time.sleep(5)
        self.send_response(503)
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


def slow_server() -> str:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


class State:
    is_world_process_zero = True

    def __init__(self) -> None:
        self.global_step = 0


def log_events(section: dict[str, Any] | None) -> tuple[float, list[float], float, int]:
    """(seconds opening the run took, microseconds each log event took, seconds the end waited, points not
    delivered)."""
    loggers = []
    started = time.monotonic()
    if section:
        cfg = RunConfig.model_validate({"name": "bench", "tracking": section})
        loggers = trackers.open_loggers(cfg, tracking.identity(cfg, f"bench-{time.time_ns()}", 1))
    open_s = time.monotonic() - started
    callback = tracking.callback(loggers)
    state, took = State(), []
    logs = {"loss": 1.0, "learning_rate": 2e-4, "grad_norm": 0.5, "epoch": 0.1, "mean_token_accuracy": 0.3}
    for step in range(EVENTS):
        state.global_step = step
        started = time.perf_counter()
        callback.on_log(None, state, None, logs=logs)
        took.append((time.perf_counter() - started) * 1e6)
    ended = time.monotonic()
    lost = sum(tracking_run.undelivered for tracking_run in (logger.close() for logger in loggers))
    return open_s, took, time.monotonic() - ended, lost


def spread(values: list[float], digits: int = 1) -> str:
    return f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f} / {max(values):.{digits}f}"


def step_costs(repeats: int, uri: str, vertex: str) -> None:
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    tracking.END_BOUND_S = 5.0
    cases: dict[str, Callable[[], dict[str, Any] | None]] = {
        "no tracking": lambda: None,
        "MLflow up": lambda: {"mlflow": {"uri": uri}},
        "MLflow down (refused)": lambda: {"mlflow": {"uri": f"http://127.0.0.1:{emulators.free_port()}"}},
        "MLflow failing slowly (503 after 5 s)": lambda: {"mlflow": {"uri": slow_server()}},
        "MLflow slow, answering (1 s an answer)": lambda: {"mlflow": {"uri": delayed(uri)}},
        "Vertex AI up (stand-in)": lambda: {"vertex": {"endpoint": vertex, "project": "bench-proj"}},
    }
    rows: dict[str, tuple[list[float], ...]] = {name: ([], [], [], [], []) for name in cases}
    for _ in range(repeats):  # interleaved
        for name, where in cases.items():
            open_s, took, end_s, lost = log_events(where())
            for column, value in zip(
                rows[name], (open_s, statistics.median(took), max(took), end_s, lost), strict=True
            ):
                column.append(value)
            print(
                f"{name}: open {open_s:.2f} s, median {statistics.median(took):.1f} us, end {end_s:.2f} s, lost {lost}",
                flush=True,
            )
    print(
        f"\nA log event through the tracking callback, {EVENTS} events a repeat, {repeats} repeats (min / median / max)\n"
    )
    print("| tracker | opening the run, s | median µs an event | slowest event µs | the end's wait, s | points lost |")
    print("|---|---|---|---|---|---|")
    for name, (opens, medians, slowest, ends, lost) in rows.items():
        print(
            f"| {name} | {spread(opens, 2)} | {spread(medians)} | {spread(slowest)} | {spread(ends, 2)} | "
            f"{spread(lost, 0)} |"
        )


def quickstart(workdir: Path, config: Path) -> float:
    proc = subprocess.run(
        [RAYTUNE, "local", "--workdir", str(workdir), "--json", "--keep-warm", "600", str(config)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    record = json.loads(proc.stdout)
    assert record["state"] == "SUCCEEDED", proc.stderr[-3000:]
    return float(record["result"]["timings"][TRAINING])


def training_phase(repeats: int, uri: str, folder: Path) -> None:
    base = json.loads((ROOT / "functions" / "local" / "quickstart.json").read_text())
    off, on = folder / "off.json", folder / "on.json"
    off.write_text(json.dumps(base))
    on.write_text(json.dumps({**base, "tracking": {"mlflow": {"uri": uri}}}))
    workdir = folder / "w"
    quickstart(workdir, off)  # the warm head every measured run reuses
    seconds: dict[str, list[float]] = {"off": [], "on (MLflow up)": []}
    try:
        for _ in range(repeats):
            seconds["off"].append(quickstart(workdir, off))
            seconds["on (MLflow up)"].append(quickstart(workdir, on))
            print(f"training: off {seconds['off'][-1]:.2f} s, on {seconds['on (MLflow up)'][-1]:.2f} s", flush=True)
    finally:
        subprocess.run([RAYTUNE, "local", "--stop", "--workdir", str(workdir)], capture_output=True, timeout=120)
    print(
        f"\nThe quickstart's training phase (14 steps, 2 workers, CPU), warm head, {repeats} repeats each, interleaved\n"
    )
    print("| tracking | training phase, s (min / median / max) |")
    print("|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {spread(values, 2)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-runs", action="store_true", help="the log events only, no quickstart runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        service, uri = start_mlflow(Path(folder) / "mlflow")
        vertex = FakeVertex()
        serve_in_thread(vertex)
        try:
            step_costs(args.repeats, uri, vertex.endpoint)
            if not args.no_runs:
                training_phase(args.repeats, uri, Path(folder))
        finally:
            service.stop()
            vertex.shutdown()
    print(f"\n{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
