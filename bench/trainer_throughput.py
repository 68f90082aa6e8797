"""Trainer throughput: our settings against the reference recipe's, side by side in one run.

CPU (default): the tiny Gemma 3 through the real pipeline (processor, our collator, TRL SFTTrainer,
PEFT LoRA), one process, the same samples and the same number of optimizer steps for both:
    reference: eager attention, batch 1 x gradient accumulation 4, loss on every token
    ours:      sdpa attention,  batch 4 x gradient accumulation 1, loss on the answer only
Each variant runs --repeats times, interleaved; medians are reported.

GPU (--gpu): a randomly initialised Gemma-3-4B architecture built from its config (no download),
synthetic image+text batches, reference (QLoRA NF4, eager, batch 1 x 4) against ours (bf16 LoRA,
sdpa, batch 4); prints tokens/s/GPU and MFU (6 x parameters x tokens / peak bf16 FLOP/s).

    .venv/bin/python bench/trainer_throughput.py [--steps 12] [--repeats 3]
    python bench/trainer_throughput.py --gpu [--steps 10] [--seq 768]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "reference": {"attn": "eager", "batch": 1, "accumulation": 4, "assistant_only": False},
    "ours": {"attn": "sdpa", "batch": 4, "accumulation": 1, "assistant_only": True},
}


def cpu_variant(name: str, source: str, steps: int) -> dict:
    import torch
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from functions.core.config import DatasetSpec, LoraSpec, ModelSpec, PromptSpec
    from trainer import tiny
    from trainer.collator import VisionSFTCollator
    from trainer.model import load_model, load_processor, lora_config

    settings = VARIANTS[name]
    torch.manual_seed(0)
    spec = ModelSpec(id="tiny://gemma3", dtype="float32", quantization="none", attn_implementation=settings["attn"])
    processor = load_processor(spec, source)
    samples = steps * settings["batch"] * settings["accumulation"]
    with tempfile.TemporaryDirectory() as output:
        trainer = SFTTrainer(
            model=load_model(spec, source),
            args=SFTConfig(
                output_dir=output,
                max_steps=steps,
                per_device_train_batch_size=settings["batch"],
                gradient_accumulation_steps=settings["accumulation"],
                gradient_checkpointing=True,
                gradient_checkpointing_kwargs={"use_reentrant": False},
                learning_rate=2e-4,
                optim="adamw_torch",
                logging_steps=1,
                save_strategy="no",
                report_to=[],
                use_cpu=True,
                dataset_kwargs={"skip_prepare_dataset": True},
                remove_unused_columns=False,
                max_length=None,
                disable_tqdm=True,
                seed=0,
            ),
            train_dataset=tiny.product_dataset(samples, seed=1),
            data_collator=VisionSFTCollator(
                processor, DatasetSpec(), PromptSpec(), 1024, assistant_only=settings["assistant_only"]
            ),
            processing_class=processor,
            peft_config=lora_config(LoraSpec()),
        )
        trainer.remove_callback(PrinterCallback)  # keep the figures readable
        started = time.perf_counter()
        trainer.train()
        elapsed = time.perf_counter() - started
    tokens = max(entry.get("num_tokens", 0) for entry in trainer.state.log_history)
    return {
        "seconds": elapsed,
        "samples_per_s": samples / elapsed,
        "tokens_per_s": tokens / elapsed,
        "loss": trainer.state.log_history[-1].get("train_loss"),
    }


def run_cpu(args) -> None:
    from functions.core.config import ModelSpec
    from trainer.model import resolve_source

    source = resolve_source(ModelSpec(id="tiny://gemma3"))
    cpu_variant("ours", source, 2)  # warm-up: imports, allocator, kernels
    results = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name in VARIANTS:
            results[name].append(cpu_variant(name, source, args.steps))
    print(f"tiny Gemma 3 on CPU, {args.steps} optimizer steps of 4 samples each, {args.repeats} interleaved repeats")
    medians = {}
    for name, runs in results.items():
        medians[name] = {k: statistics.median(r[k] for r in runs) for k in ("samples_per_s", "tokens_per_s", "seconds")}
        print(
            f"  {name:9s} {VARIANTS[name]}: {medians[name]['samples_per_s']:.2f} samples/s, "
            f"{medians[name]['tokens_per_s']:.0f} tokens/s, {medians[name]['seconds']:.1f} s"
        )
    for key in ("samples_per_s", "tokens_per_s"):
        print(
            f"  ours / reference, {key.replace('_per_s', '')}/s: {medians['ours'][key] / medians['reference'][key]:.2f}x"
        )


# --- GPU -----------------------------------------------------------------------------------------

GEMMA3_4B = {
    "text_config": {
        "vocab_size": 262208,
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 1024,
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "vision_config": {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "image_size": 896,
        "patch_size": 14,
        "vision_use_head": False,
    },
    "mm_tokens_per_image": 256,
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "image_token_index": 262144,
}
PEAK_BF16_TFLOPS = {"H100": 989, "H200": 989, "B200": 2250, "A100": 312, "L4": 121}


def synthetic_batch(batch: int, seq: int, device):
    import torch

    ids = torch.randint(1000, 200000, (batch, seq), device=device)
    ids[:, 1] = 255999
    ids[:, 2:258] = 262144
    ids[:, 258] = 256000
    token_types = (ids == 262144).long()
    labels = ids.clone()
    labels[:, :260] = -100
    pixels = torch.randn(batch, 3, 896, 896, device=device, dtype=torch.bfloat16)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": token_types,
        "pixel_values": pixels,
        "labels": labels,
    }


def gpu_variant(name: str, checkpoint: str, steps: int, seq: int) -> dict:
    import torch
    from peft import get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForImageTextToText

    from functions.core.config import LoraSpec, ModelSpec
    from trainer.model import lora_config, quantization_config

    settings = VARIANTS[name]
    torch.cuda.reset_peak_memory_stats()
    quantized = name == "reference"
    spec = ModelSpec(quantization="nf4" if quantized else "none", attn_implementation=settings["attn"])
    model = AutoModelForImageTextToText.from_pretrained(
        checkpoint,
        dtype=torch.bfloat16,
        device_map={"": 0},
        attn_implementation=settings["attn"],
        quantization_config=quantization_config(spec),
    )
    if quantized:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = get_peft_model(model, lora_config(LoraSpec()))
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=True)
    batch = synthetic_batch(settings["batch"], seq, "cuda")

    def optimizer_step():
        for _ in range(settings["accumulation"]):
            loss = model(**batch).loss / settings["accumulation"]
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.3)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        optimizer_step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        optimizer_step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    tokens = steps * settings["batch"] * settings["accumulation"] * seq
    return {
        "tokens_per_s": tokens / elapsed,
        "samples_per_s": tokens / seq / elapsed,
        "parameters": parameters,
        "memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def run_gpu(args) -> None:
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    name = torch.cuda.get_device_name(0)
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    with tempfile.TemporaryDirectory(dir=args.workdir) as checkpoint:
        started = time.perf_counter()
        with torch.device("cuda"):
            model = Gemma3ForConditionalGeneration(Gemma3Config(**GEMMA3_4B)).to(torch.bfloat16)
        model.save_pretrained(checkpoint)  # from_pretrained is the path QLoRA quantizes on
        del model
        torch.cuda.empty_cache()
        print(f"{name}: random Gemma-3-4B architecture built and saved in {time.perf_counter() - started:.0f} s")
        results = {}
        for variant in ("ours", "reference"):
            results[variant] = gpu_variant(variant, checkpoint, args.steps, args.seq)
            gc.collect()  # the variant's model and optimizer are gone: give their memory back
            torch.cuda.empty_cache()
    for variant, r in results.items():
        mfu = 6 * r["parameters"] * r["tokens_per_s"] / (peak * 1e12) if peak else float("nan")
        print(
            f"  {variant:9s} {VARIANTS[variant]}: {r['tokens_per_s']:.0f} tokens/s/GPU, "
            f"{r['samples_per_s']:.2f} samples/s, MFU {mfu:.1%} (peak {peak} TFLOP/s), "
            f"peak memory {r['memory_gib']:.1f} GiB"
        )
    print(
        f"  ours / reference, tokens/s: {results['ours']['tokens_per_s'] / results['reference']['tokens_per_s']:.2f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="the 4B-architecture GPU variant")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps to time (CPU 12, GPU 10)")
    parser.add_argument("--repeats", type=int, default=3, help="CPU: interleaved repeats of each variant")
    parser.add_argument("--seq", type=int, default=768, help="GPU: tokens a sample (256 of them image tokens)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="GPU: peak dense bf16 TFLOP/s for MFU")
    parser.add_argument("--workdir", default=None, help="GPU: where the random checkpoint is written")
    args = parser.parse_args()
    if args.gpu:
        args.steps = args.steps or 10
        run_gpu(args)
    else:
        args.steps = args.steps or 12
        run_cpu(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
