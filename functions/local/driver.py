"""`raytune local`: the embedded local default. The same launch and watch handlers, on this machine:
the bucket is fake-gcs-server (run records, the uploaded config), the cluster a local Ray cluster
(functions/local/platform.py), checkpoints a local folder, the model the tiny Gemma 3.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from functions.adapters.store import RunStore
from functions.handlers import launch, watch
from functions.handlers.context import Context
from functions.handlers.settings import Settings
from functions.local import emulators
from functions.local.cloudevents import message_published, object_finalized
from functions.local.platform import LocalRay
from trainer.codehash import ROOT

BUCKET = "raytune-local"
EVENTS_TOPIC = "local/run-events"
TICK_S = 2.0
PROGRESS = re.compile(r"\{'loss'|'train_runtime'|Checkpoint successfully created|Error|error:")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ConsolePublisher:
    """Run-finished events go to the console locally (Pub/Sub in the cloud)."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def publish(self, topic: str, message: dict[str, Any], **attributes: str) -> str:
        self.say(f"event -> {topic}: {json.dumps(message, sort_keys=True)}")
        return "local"


class Console:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)


def run(config_path: str, workdir: Path = ROOT / ".raytune" / "local") -> int:
    """`raytune local CONFIG`: upload the config, launch, watch to the end, print the run record."""
    from functions.adapters.gcs import Bucket, storage_client

    say = Console()
    # A terminated `raytune local` still stops its Ray nodes and fake-gcs-server (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("functions").setLevel(logging.INFO)
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoints = workdir / "checkpoints"
    gcs = emulators.fake_gcs(workdir / "fake-gcs.log", data_dir=workdir / "gcs")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
    platform = LocalRay(workdir)
    try:
        client = storage_client()
        if client.lookup_bucket(BUCKET) is None:
            client.create_bucket(BUCKET)
        say(f"bucket gs://{BUCKET} on fake-gcs-server {gcs.url}; checkpoints in {checkpoints}")
        raw = json.loads(Path(config_path).read_text())
        raw.setdefault("storage_path", str(checkpoints))
        blob = client.bucket(BUCKET).blob(f"configs/{Path(config_path).name}")
        blob.upload_from_string(json.dumps(raw), content_type="application/json")
        say(f"uploaded gs://{BUCKET}/{blob.name}#{blob.generation}")
        settings = Settings(
            project="local",
            bucket=BUCKET,
            watch_topic=None,
            events_topic=EVENTS_TOPIC,
            max_event_age_s=3600,
            hf_token=os.environ.get("HF_TOKEN") or None,
        )
        ctx = Context(
            settings=settings, store=RunStore(Bucket(BUCKET)), platform=platform, publisher=ConsolePublisher(say)
        )
        event = object_finalized(BUCKET, blob.name, blob.generation, blob.size, blob.time_created)
        record = launch.handle(event, ctx)
        assert record is not None, "a config upload is never ignored"
        say(f"launch: run {record.run_id} is {record.state.value}: {record.reason}")
        say(f"worker group: {len(platform.nodes)} nodes")
        return _follow(ctx, platform, record.run_id, say)
    finally:
        platform.shutdown()
        gcs.stop()


def _follow(ctx: Context, platform: LocalRay, run_id: str, say: Callable[[str], None]) -> int:
    state, shown = None, set()
    while True:
        watch.handle(message_published({"kind": "tick"}, str(time.time_ns())), ctx)
        record = ctx.store.get(run_id)
        assert record is not None
        if record.state != state:
            state = record.state
            say(f"run {run_id}: {state.value}" + (f" ({record.reason})" if record.reason else ""))
        if platform.head is not None and platform.job_status(None, run_id) is not None:
            for line in platform.logs(run_id).splitlines():
                # Ray forwards a worker's line from several log streams: show each once.
                if PROGRESS.search(line) and line not in shown:
                    shown.add(line)
                    say("  " + ANSI.sub("", line).strip()[:200])
        if record.settled:
            say(f"worker group: {len(platform.nodes)} nodes (scaled down after the run)")
            print(json.dumps(record.model_dump(mode="json"), indent=2))
            return 0 if record.state.value == "SUCCEEDED" else 1
        time.sleep(TICK_S)
