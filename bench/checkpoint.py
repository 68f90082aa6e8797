"""What a training checkpoint of a LoRA run costs, for the checkpoint interval on Spot (trainer/checkpoints.py,
docs/capacity.md): its size per trainable parameter and its write time, measured on the tiny Gemma 3 (what HF's
Trainer writes: the adapter, AdamW's state, scheduler, RNG and trainer state), to a local disk and uploaded to
GCS (fake-gcs-server here, through pyarrow's GcsFileSystem as Ray Train uploads checkpoints), interleaved,
min / median / max; then scaled to gemma-3-4b-it, whose trainable parameters are counted exactly on the real
architecture built on PyTorch's meta device (no weights needed).

    .venv/bin/python bench/checkpoint.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def real_trainable() -> int:
    """gemma-3-4b-it's trainable parameters under the shipped LoRA (all-linear, r 16), on the meta device."""
    import torch
    from peft import get_peft_model
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    from bench.trainer_throughput import GEMMA3_4B  # google/gemma-3-4b-it's config.json
    from functions.core.config import LoraSpec
    from trainer.model import lora_config

    with torch.device("meta"):
        model = Gemma3ForConditionalGeneration(Gemma3Config(**GEMMA3_4B))
        return trainable(get_peft_model(model, lora_config(LoraSpec())))


def tiny_checkpoint(folder: Path) -> int:
    """A checkpoint of the tiny model as HF's Trainer writes it after a step; returns its trainable parameters."""
    import json

    import torch
    from peft import get_peft_model

    from functions.core.config import LoraSpec
    from trainer import tiny
    from trainer.model import lora_config

    model = get_peft_model(tiny.build_model(tiny.build_processor()), lora_config(LoraSpec()))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer)
    ids = torch.randint(0, 100, (2, 32))
    model(input_ids=ids, labels=ids).loss.backward()
    for p in model.parameters():  # a text-only batch leaves the vision tower's LoRA without a gradient; a
        if p.requires_grad and p.grad is None:  # real one gives every adapter weight AdamW state
            p.grad = torch.zeros_like(p)
    optimizer.step()
    model.save_pretrained(folder)
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    torch.save({"python": 0, "torch": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    return trainable(model)


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import pyarrow.fs as pafs

    from functions.local import emulators

    work = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    gcs = emulators.fake_gcs(work / "fake-gcs.log")
    try:
        source = work / "checkpoint"
        source.mkdir()
        tiny_params = tiny_checkpoint(source)
        tiny_bytes = size(source)
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        from functions.adapters.gcs import storage_client

        storage_client().create_bucket("bench")
        fs = pafs.GcsFileSystem(anonymous=True, scheme="http", endpoint_override=gcs.url.removeprefix("http://"))
        times: dict[str, list[float]] = {"local disk": [], "GCS (fake-gcs-server)": []}
        for repeat in range(args.repeats):  # interleaved: the two targets share the machine's moments
            target = work / f"copy-{repeat}"
            started = time.perf_counter()
            shutil.copytree(source, target)
            times["local disk"].append(time.perf_counter() - started)
            started = time.perf_counter()
            pafs.copy_files(str(source), f"bench/checkpoint-{repeat}", destination_filesystem=fs)
            times["GCS (fake-gcs-server)"].append(time.perf_counter() - started)
        # What grows with the adapter: its weights and AdamW's state; the rest (RNG, scheduler, trainer state,
        # adapter config) is a fixed few kB.
        scaling = sum((source / name).stat().st_size for name in ("adapter_model.safetensors", "optimizer.pt"))
        per_param, fixed = scaling / tiny_params, tiny_bytes - scaling
        real = real_trainable()
        real_bytes = real * per_param + fixed
        print(f"tiny Gemma 3: {tiny_params:,} trainable parameters, checkpoint {tiny_bytes / 1e6:.2f} MB")
        print(
            f"  {per_param:.1f} bytes per trainable parameter (adapter fp32 + AdamW's two moments), {fixed / 1e3:.0f} kB fixed"
        )
        print(f"{'write':<24} {'min':>8} {'median':>8} {'max':>8}   (seconds, {args.repeats} interleaved repeats)")
        for what, values in times.items():
            print(f"{what:<24} {min(values):8.4f} {statistics.median(values):8.4f} {max(values):8.4f}")
        gcs_rate = tiny_bytes / statistics.median(times["GCS (fake-gcs-server)"])
        print(f"gemma-3-4b-it, LoRA all-linear r 16: {real:,} trainable parameters")
        print(f"  checkpoint {real_bytes / 1e6:.0f} MB at the tiny model's bytes per parameter")
        print(f"  at 200 MB/s to GCS (trainer/checkpoints.py): {real_bytes / 200e6:.1f} s")
        print(
            f"  at this machine's fake-gcs-server rate ({gcs_rate / 1e6:.0f} MB/s, small files): {real_bytes / gcs_rate:.1f} s"
        )
    finally:
        gcs.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
