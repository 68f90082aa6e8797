"""The preflight's data check (trainer/data.py check_rows) on 10,000 rows: what checking every row before
training costs now that it decodes every image whole (a JPEG cut short has a sound header: only decoding finds it),
against the earlier check that read headers only (PIL's verify), interleaved in one run, 5 rounds by default. The dataset is parquet shards of product rows
whose images are JPEGs of a given size (`--size`: 384 px by default, a catalogue thumbnail; the tiny set's are 64).

    .venv/bin/python bench/data_check.py --rows 10000 --rounds 5
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_dataset(folder: Path, rows: int, size: int, shards: int = 8) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(0)
    base = np.linspace(0, 255, size, dtype=np.uint8)
    per = rows // shards
    for shard in range(shards):
        images = []
        for _ in range(per):
            tint = rng.integers(0, 255, 3, dtype=np.uint8)
            pixels = np.stack([np.add.outer(base, base) // 2 ^ tint[c] for c in range(3)], axis=-1).astype(np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="JPEG", quality=85)
            images.append(out.getvalue())
        table = pa.table(
            {
                "Product Name": [f"product {shard}-{i}" for i in range(per)],
                "Category": ["Home & Kitchen"] * per,
                "description": ["A sturdy, washable thing for the kitchen."] * per,
                "image": images,
            }
        )
        pq.write_table(table, folder / f"shard-{shard}.parquet")


def check(spec) -> float:
    from trainer.data import check_rows

    started = time.perf_counter()
    check_rows(spec)
    return time.perf_counter() - started


def headers_only(spec) -> float:
    """The earlier check's image part: each image's header and structure read (PIL verify), in the same threads."""
    from concurrent.futures import ThreadPoolExecutor
    from io import BytesIO

    import datasets
    from PIL import Image

    from trainer.data import load

    def verified(image: dict) -> None:
        with Image.open(BytesIO(image["bytes"])) as opened:
            opened.verify()

    started = time.perf_counter()
    raw = load(spec).cast_column("image", datasets.Image(decode=False))
    with ThreadPoolExecutor(max_workers=8) as pool:
        for start in range(0, len(raw), 512):
            list(pool.map(verified, raw[start : start + 512]["image"]))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from functions.core.config import DatasetSpec

    with tempfile.TemporaryDirectory() as folder:
        write_dataset(Path(folder), args.rows, args.size)
        megabytes = sum(f.stat().st_size for f in Path(folder).iterdir()) / 2**20
        spec = DatasetSpec(id=folder)
        check(spec)  # the datasets library's cache of the parquet files is made once, as on a node
        arms = {
            "check_rows (shipped: every image decoded whole)": check,
            "headers only (PIL verify, before)": headers_only,
        }
        times: dict[str, list[float]] = {name: [] for name in arms}
        for round_ in range(args.rounds):
            order = list(arms.items())
            for name, arm in order[round_ % 2 :] + order[: round_ % 2]:
                times[name].append(arm(spec))
    print(
        f"{args.rows} rows, {args.size}x{args.size} JPEG images, {megabytes:.0f} MiB of parquet, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {args.rounds} rounds interleaved"
    )
    print("| arm | min | median | max | per 1,000 rows (median) |")
    print("|---|---|---|---|---|")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(
            f"| {name} | {min(seconds):.2f} s | {median:.2f} s | {max(seconds):.2f} s | "
            f"{median / args.rows * 1000:.3f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
