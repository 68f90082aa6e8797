"""The collator's share of a training step, at the real image size, in the training process (workers=0,
the reference's way) against dataloader workers (the default on GPU).

The collator renders the chat template, tokenizes, decodes each JPEG and resizes it to 896 px. Here it
runs on product photos of Amazon size (1000 x 1000 JPEG) through a Gemma 3 processor at 896 px, and a
training step is stood in for by a fixed wait (--step-ms, default 230: a batch of 4 at the 10%-MFU
estimate of docs/performance.md), so what is measured is how long the training process waits for each
batch. Interleaved repeats, min / median / max.

    .venv/bin/python bench/collator.py [--repeats 5] [--steps 12] [--workers 2]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REAL_SIZE = 896


def real_size_rows(count: int) -> list[dict]:
    from PIL import Image

    from trainer import tiny

    rows = tiny.product_rows(count, seed=3)
    for row in rows:
        photo = row["image"].resize((1000, 1000))
        buffer = io.BytesIO()
        photo.save(buffer, format="JPEG", quality=90)
        row["image"] = Image.open(io.BytesIO(buffer.getvalue()))  # decoded on access, as from parquet
    return rows


def collator():
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    from functions.core.config import DatasetSpec, PromptSpec
    from trainer import tiny
    from trainer.collator import VisionSFTCollator

    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": REAL_SIZE, "width": REAL_SIZE}),
        tokenizer=tiny.build_tokenizer(),
        chat_template=tiny.CHAT_TEMPLATE,
        image_seq_length=tiny.TOKENS_PER_IMAGE,
    )
    return VisionSFTCollator(processor, DatasetSpec(), PromptSpec(), 4096, assistant_only=True)


def waits(rows: list[dict], workers: int, steps: int, step_s: float) -> list[float]:
    """Seconds the training process waited for each batch (the first excluded: start-up)."""
    from torch.utils.data import DataLoader

    loader = DataLoader(
        rows, batch_size=4, collate_fn=collator(), num_workers=workers, prefetch_factor=2 if workers else None
    )
    waited = []
    batches = iter(loader)
    for step in range(steps + 1):
        started = time.perf_counter()
        next(batches)
        if step:
            waited.append(time.perf_counter() - started)
        time.sleep(step_s)  # the GPU's step
    return waited


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=230)
    args = parser.parse_args(argv)
    rows = real_size_rows(4 * (args.steps + 1))
    single = collator()
    per_sample = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        single(rows[:4])
        per_sample.append((time.perf_counter() - started) / 4 * 1000)
    arms = {"in the training process (workers=0)": 0, f"dataloader workers={args.workers}": args.workers}
    results: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, workers in arms.items():
            results[name].append(statistics.mean(waits(rows, workers, args.steps, args.step_ms / 1000)) * 1000)
    print(
        f"collator at {REAL_SIZE} px (1000 x 1000 JPEG in): {min(per_sample):.1f} / {statistics.median(per_sample):.1f} / "
        f"{max(per_sample):.1f} ms a sample (min / median / max, {args.repeats} repeats)\n"
    )
    print(
        f"| where the collator runs | wait for a batch of 4, ms (min / median / max) | share of a {args.step_ms:.0f} ms step |"
    )
    print("|---|---|---|")
    for name, values in results.items():
        median = statistics.median(values)
        print(
            f"| {name} | {min(values):.1f} / {median:.1f} / {max(values):.1f} | {median / (median + args.step_ms):.0%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
