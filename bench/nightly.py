"""Nightly benchmark: what deciding "nothing new tonight" costs the launch function, on fake-gcs-server.

For a gs:// dataset prefix of 1, 100 and 1000 parquet shards: the dataset listing alone (object
generations), and the whole launch handler for a nightly whose inputs are unchanged (record, fingerprint,
SKIPPED, run-finished event), interleaved, `--repeats` times each. No Kubernetes call is made on this path.

    .venv/bin/python bench/nightly.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARDS = (1, 100, 1000)
NOW = dt.datetime(2027, 1, 1, 2, 0, tzinfo=dt.UTC)


class Events:
    def __init__(self):
        self.states: list[str] = []

    def publish(self, topic, message, **attributes):
        self.states.append(message["state"])
        return "bench"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import os

    from functions.local import emulators

    workdir = Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    gcs = emulators.fake_gcs(workdir / "fake-gcs.log")
    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
    try:
        run(args.repeats, workdir)
    finally:
        gcs.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(repeats: int, workdir: Path) -> None:
    import json

    from functions.adapters.gcs import Bucket, storage_client
    from functions.adapters.store import RunStore
    from functions.core.policy import Policy
    from functions.handlers.context import Context
    from functions.handlers.settings import Settings
    from functions.local.platform import LocalRay

    client = storage_client()
    client.create_bucket("bench-data")
    client.create_bucket("bench-runs")
    data = client.bucket("bench-data")
    for count in SHARDS:
        for i in range(count):
            data.blob(f"shards-{count}/part-{i:05d}.parquet").upload_from_string(b"PAR1")
    events = Events()
    platform = LocalRay.claimed(workdir, uuid.uuid4().hex)  # starts nothing: a skipped night never reaches it
    ctx = Context(
        settings=Settings(
            project="bench",
            bucket="bench-runs",
            watch_topic=None,
            events_topic="bench/run-events",
            max_event_age_s=10 * 365 * 86400,
            hf_token=None,
            checkpoints=str(workdir / "checkpoints"),
            policy=Policy.unrestricted(),
        ),
        store=RunStore(Bucket("bench-runs")),
        platform=platform,
        publisher=events,
    )
    configs, configs_raw = {}, {}
    for count in SHARDS:
        name = f"nightly-{count}"
        config = {"name": name, "dataset": {"id": f"gs://bench-data/shards-{count}"}}
        client.bucket("bench-runs").blob(f"library/{name}.json").upload_from_string(json.dumps(config))
        configs[count], configs_raw[count] = name, config
    try:
        measure(ctx, client, configs, configs_raw, repeats, events)
    finally:
        platform.shutdown()  # nothing to stop unless a night failed to skip


def measure(ctx, client, configs, configs_raw, repeats, events) -> None:
    import json

    from functions.adapters import datasets
    from functions.core import fingerprint
    from functions.core.config import DatasetSpec
    from functions.core.config_file import parse_config
    from functions.core.fingerprint import LastTrained
    from functions.handlers import launch

    listing: dict[int, list[float]] = {count: [] for count in SHARDS}
    handler: dict[int, list[float]] = {count: [] for count in SHARDS}
    day = NOW.date()
    for repeat in range(repeats):
        for count in SHARDS:  # interleaved: each size in every round
            spec = DatasetSpec(id=f"gs://bench-data/shards-{count}")
            started = time.perf_counter()
            found, _ = datasets.versions(spec)
            listing[count].append(time.perf_counter() - started)
            assert found is not None and len(found) == count
            name = configs[count]
            if repeat == 0:  # the night that trained, as it left its pointer
                config = parse_config(json.dumps(configs_raw[count])).with_storage(ctx.settings.default_storage)
                trained = fingerprint.inputs(config.model_dump(mode="json"), ctx.platform.code_sha256(), found)
                pointer = LastTrained(
                    name=name, run_id="nightly-trained", fingerprint=trained.fingerprint or "", created_at=NOW
                )
                ctx.nightlies.swap(name, lambda _, p=pointer: p)
            night = day + dt.timedelta(days=repeat + 1)
            started = time.perf_counter()
            record = launch.handle(nightly(name, night), ctx)
            handler[count].append(time.perf_counter() - started)
            assert record is not None and record.state.value == "SKIPPED", record
    print(f"a skipped night, {repeats} repeats, sizes interleaved ({events.states.count('SKIPPED')} SKIPPED events)")
    print("| shards | dataset listing, ms (min / median / max) | skipped-night launch, ms (min / median / max) |")
    print("|---|---|---|")
    for count in SHARDS:
        print(f"| {count} | {fmt(listing[count])} | {fmt(handler[count])} |")


def nightly(name: str, night: dt.date):
    from functions.local.cloudevents import message_published

    body = {"config_uri": f"gs://bench-runs/library/{name}.json", "nightly": True, "run_name": name}
    published = dt.datetime.combine(night, dt.time(2, 0), tzinfo=dt.UTC)
    return message_published(body, uuid.uuid4().hex, published=published)


def fmt(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return f"{min(ms):.1f} / {statistics.median(ms):.1f} / {max(ms):.1f}"


if __name__ == "__main__":
    main()
