"""Trainer throughput: the reference recipe, the shipped defaults, and each lever alone, side by side.

Arms are run configs: `reference` is examples/reference.json's model/lora/training sections exactly
(NF4 QLoRA, eager attention, batch 1 x 4, gradient checkpointing, full lm_head/embed_tokens copies, loss
on every token), `default` is what RunConfig() ships, and each `lever:` arm is the reference with one
default applied. Every arm runs --repeats times, interleaved (arm order rotates each round), and the
table gives min / median / max.

CPU (default): the tiny Gemma 3 through the real pipeline (trainer.model, our collator, TRL SFTTrainer,
PEFT LoRA), the same samples per optimizer step for every arm. Tokens are counted without padding.

GPU (--gpu): a random-init Gemma-3-4B architecture built from its config (no download), synthetic
batches at the real shape (896 px images: 4,096 patches through the vision tower, 256 image tokens, the
rest text); prints tokens/s/GPU, MFU against the device's dense bf16 peak from the true FLOPs (text
and vision towers, LoRA backward, recomputation when checkpointing) and peak memory. `bench/gpu.sh`
prepares its environment. `--gpu --cpu-check` runs that code path on CPU with a tiny architecture (the
suite does, so the first GPU run does not fail on a typo).

    .venv/bin/python bench/trainer_throughput.py [--steps 8] [--repeats 5] [--arms reference,default]
    python bench/trainer_throughput.py --gpu [--steps 6] [--repeats 5] [--seq 768]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLES_PER_STEP = 4  # the recipe's effective batch per worker: 1 x 4, or 4 x 1


def arms() -> dict[str, Any]:
    """name -> RunConfig: the reference, the default, and the reference with each default lever alone."""
    from functions.core.config import RunConfig
    from functions.core.config_file import parse_config

    reference = parse_config((ROOT / "examples" / "reference.json").read_bytes())
    default = RunConfig()

    def lever(section: str, **changes: Any) -> Any:
        return reference.model_copy(update={section: getattr(reference, section).model_copy(update=changes)})

    return {
        "reference": reference,
        "default": default.model_copy(update={"scaling": reference.scaling, "cluster": reference.cluster}),
        "lever: no quantization": lever("model", quantization="none"),
        "lever: sdpa": lever("model", attn_implementation="sdpa"),
        "lever: batch 4 x 1": lever("training", per_device_batch_size=4, gradient_accumulation_steps=1),
        "lever: no checkpointing": lever("training", gradient_checkpointing=False),
        "lever: no modules_to_save": lever("lora", modules_to_save=[]),
        "lever: answer-only loss": lever("training", assistant_only_loss=True),
    }


def describe(cfg: Any, weights: str) -> str:
    """An arm's settings as they ran: `weights` is what the loaded model held (weights_of), not what the config
    asked for (on CPU every arm computes in fp32)."""
    m, t = cfg.model, cfg.training
    return (
        f"{weights} {m.attn_implementation} "
        f"{t.per_device_batch_size}x{t.gradient_accumulation_steps} ckpt={'on' if t.gradient_checkpointing else 'off'} "
        f"save={len(cfg.lora.modules_to_save)} {'answer' if t.assistant_only_loss else 'all'}-loss"
    )


def weights_of(model: Any) -> str:
    """What a loaded model computes in: nf4/int8 (bitsandbytes layers, with their compute dtype) or its dtype."""
    import torch

    names = {type(module).__name__ for module in model.modules()}
    dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(model.dtype, str(model.dtype))
    if "Linear4bit" in names:
        return f"nf4/{dtype}"
    if "Linear8bitLt" in names:
        return "int8"
    return dtype


def spread(values: list[float]) -> str:
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f}"


def interleaved(names: list[str], repeats: int, run: Any) -> dict[str, list[dict]]:
    """Each round runs every arm once, the order rotated, so drift on a shared machine hits all arms alike."""
    results: dict[str, list[dict]] = {name: [] for name in names}
    for round_ in range(repeats):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            results[name].append(run(name))
            # each run as it ends (flushed): a run cut short by its time limit still leaves what it measured
            print(f"round {round_ + 1} {name}: {json.dumps(results[name][-1])}", flush=True)
            gc.collect()
            _empty_cuda_cache()
    return results


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- CPU -----------------------------------------------------------------------------------------


def cpu_arm(cfg: Any, source: str, steps: int) -> dict:
    import torch
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from trainer import tiny
    from trainer.collator import VisionSFTCollator
    from trainer.model import load_model, load_processor, lora_config

    torch.manual_seed(0)
    m, t = cfg.model, cfg.training
    spec = m.model_copy(update={"id": "tiny://gemma3", "dtype": "float32"})
    processor = load_processor(spec, source)
    samples = steps * SAMPLES_PER_STEP
    collator = VisionSFTCollator(processor, cfg.dataset, cfg.prompts, 1024, assistant_only=t.assistant_only_loss)
    model = load_model(spec, source)
    weights = weights_of(model)
    with tempfile.TemporaryDirectory() as output:
        trainer = SFTTrainer(
            model=model,
            args=SFTConfig(
                output_dir=output,
                max_steps=steps,
                per_device_train_batch_size=t.per_device_batch_size,
                gradient_accumulation_steps=SAMPLES_PER_STEP // t.per_device_batch_size,
                gradient_checkpointing=t.gradient_checkpointing,
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
            data_collator=collator,
            processing_class=processor,
            peft_config=lora_config(cfg.lora),
        )
        trainer.remove_callback(PrinterCallback)
        started = time.perf_counter()
        trainer.train()  # Trainer.train() puts the model in train mode (dropout, checkpointing on)
        elapsed = time.perf_counter() - started
    # num_tokens counts attention-mask tokens: no padding.
    tokens = max(entry.get("num_tokens", 0) for entry in trainer.state.log_history)
    return {
        "samples_per_s": samples / elapsed,
        "tokens_per_s": tokens / elapsed,
        "seconds": elapsed,
        "weights": weights,
    }


def run_cpu(args: argparse.Namespace) -> dict[str, list[dict]]:
    from functions.core.config import ModelSpec
    from trainer.model import resolve_source

    configs = arms()
    names = args.arms.split(",") if args.arms else list(configs)
    with tempfile.TemporaryDirectory(prefix="tiny-gemma3-") as folder:
        source = resolve_source(ModelSpec(id="tiny://gemma3"), folder)
        cpu_arm(configs["default"], source, 1)  # warm-up: imports, allocator, kernels
        results = interleaved(names, args.repeats, lambda name: cpu_arm(configs[name], source, args.steps))
    reference = [r["tokens_per_s"] for r in results.get("reference", [])]
    table = [
        f"tiny Gemma 3 on CPU, {args.steps} optimizer steps of {SAMPLES_PER_STEP} samples each, "
        f"{args.repeats} interleaved repeats (min / median / max; the ratio's range is worst to best pairing)",
        "",
        "| arm | what ran | tokens/s | samples/s x100 | vs reference: median (range) |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        runs = results[name]
        tokens = [r["tokens_per_s"] for r in runs]
        ratio = (
            f"{statistics.median(tokens) / statistics.median(reference):.2f}x "
            f"({min(tokens) / max(reference):.2f}-{max(tokens) / min(reference):.2f})"
            if reference
            else "-"
        )
        table.append(
            f"| {name} | {describe(configs[name], runs[0]['weights'])} | {spread(tokens)} | "
            f"{spread([100 * r['samples_per_s'] for r in runs])} | {ratio} |"
        )
    print("\n".join(table))
    return results


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


def check_arch() -> dict:
    """The tiny Gemma 3's architecture (trainer/tiny.py), for --cpu-check: the GPU code path on CPU."""
    from trainer import tiny

    config = tiny.build_config(tiny.build_tokenizer()).to_dict()
    keys = (
        "text_config",
        "vision_config",
        "mm_tokens_per_image",
        "boi_token_index",
        "eoi_token_index",
        "image_token_index",
    )
    return {key: config[key] for key in keys}


PEAK_BF16_TFLOPS = {"H100": 989, "H200": 989, "B200": 2250, "A100": 312, "L4": 121}


def flops_per_sample(
    arch: dict, seq: int, checkpointing: bool, scored: int | None = None, head_trained: bool = False
) -> float:
    """Training FLOPs of one sample under LoRA, as TRL's SFTTrainer runs it. Forward: 2N per token for the text
    tower's layers (embedding lookups free), 2N per *scored* position for the LM head (TRL 1.16's fused head
    projects only the positions whose next-token label is not -100: every text token with the reference's loss,
    the answer's with assistant_only_loss; None: every position) and 2N per patch for the vision tower, plus
    self-attention's own O(n^2) term in both towers (scores and weighted sum, 4 n^2 d a layer: the text's causal,
    half of it; the vision tower's bidirectional over all 4,096 patches of an 896 px image, 2.1 TFLOP, a quarter
    of the forward). Backward: about 2N for the weight layers (activation gradients only: frozen weights get no
    weight gradient, the LoRA adapters' is negligible), 2N more at the scored positions when the head itself
    trains (the recipe's modules_to_save), and 2x the forward for attention, which has no weights and
    differentiates both of its operands. Checkpointing recomputes the whole forward once more."""
    t, v = arch["text_config"], arch["vision_config"]
    h, layers, inter = t["hidden_size"], t["num_hidden_layers"], t["intermediate_size"]
    q = t["num_attention_heads"] * t["head_dim"]
    kv = t["num_key_value_heads"] * t["head_dim"]
    text = layers * (h * q + 2 * h * kv + q * h + 3 * h * inter)
    head = 2 * h * t["vocab_size"] * (seq if scored is None else scored)
    vh, vi = v["hidden_size"], v["intermediate_size"]
    patches = (v["image_size"] // v["patch_size"]) ** 2
    vision = v["num_hidden_layers"] * (4 * vh * vh + 2 * vh * vi)
    weights = 2 * text * seq + head + 2 * vision * patches
    attention = 4 * layers * seq * seq * q / 2 + 4 * v["num_hidden_layers"] * patches * patches * vh
    backward = weights + (head if head_trained else 0) + 2 * attention
    return weights + attention + backward + ((weights + attention) if checkpointing else 0)


def synthetic_batch(arch: dict, batch: int, seq: int, device: Any) -> dict:
    import torch

    image_tokens = arch["mm_tokens_per_image"]
    size = arch["vision_config"]["image_size"]
    vocab = arch["text_config"]["vocab_size"]
    specials = torch.tensor(
        [arch["boi_token_index"], arch["eoi_token_index"], arch["image_token_index"]], device=device
    )
    ids = torch.randint(min(1000, vocab // 2), min(200000, vocab), (batch, seq), device=device)
    ids[torch.isin(ids, specials)] = min(1000, vocab // 2)  # no stray image markers in the text
    ids[:, 1] = arch["boi_token_index"]
    ids[:, 2 : 2 + image_tokens] = arch["image_token_index"]
    ids[:, 2 + image_tokens] = arch["eoi_token_index"]
    labels = ids.clone()
    labels[:, : 4 + image_tokens] = -100
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": (ids == arch["image_token_index"]).long(),
        "pixel_values": torch.randn(batch, 3, size, size, device=device, dtype=torch.bfloat16),
        "labels": labels,
    }


def gpu_arm(cfg: Any, checkpoint: str, arch: dict, steps: int, seq: int, device: str) -> dict:
    import torch
    from peft import get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForImageTextToText
    from trl.trainer.utils import add_fused_lm_head

    from trainer.model import lora_config, quantization_config

    m, t = cfg.model, cfg.training
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    quantized = m.quantization != "none" and cuda
    model = AutoModelForImageTextToText.from_pretrained(
        checkpoint,
        dtype=torch.bfloat16,
        device_map={"": 0} if cuda else None,
        attn_implementation=m.attn_implementation,
        quantization_config=quantization_config(m) if quantized else None,
    )
    kwargs = {"use_reentrant": False}
    if quantized:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=t.gradient_checkpointing, gradient_checkpointing_kwargs=kwargs
        )
    elif t.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.enable_input_require_grads()
    # The LM head SFTTrainer adds (TRL 1.16): only the scored positions go through the 262k-vocabulary projection.
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    weights = weights_of(model)
    model = get_peft_model(model, lora_config(cfg.lora))
    model.train()  # dropout and checkpointing act only in train mode
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=cuda)
    batch = synthetic_batch(arch, t.per_device_batch_size, seq, device)
    accumulation = SAMPLES_PER_STEP // t.per_device_batch_size
    if not t.assistant_only_loss:
        batch["labels"] = torch.where(batch["input_ids"] == arch["image_token_index"], -100, batch["input_ids"])

    def optimizer_step() -> None:
        for _ in range(accumulation):
            (model(**batch, fused_lm_head=True).loss / accumulation).backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 0.3)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    scored = int((batch["labels"][:, 1:] != -100).sum()) // t.per_device_batch_size  # a sample's, as the head sees
    optimizer_step()  # warm-up: kernels, allocator
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        optimizer_step()
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    samples = steps * SAMPLES_PER_STEP
    result = {
        "tokens_per_s": samples * seq / elapsed,
        "samples_per_s": samples / elapsed,
        "flops_per_s": samples
        * flops_per_sample(arch, seq, t.gradient_checkpointing, scored, "lm_head" in cfg.lora.modules_to_save)
        / elapsed,
        "weights": weights,
        "trainable_m": trainable / 1e6,
        "memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
    }
    return result  # model and optimizer go with this frame; interleaved() collects before the next arm


def run_gpu(args: argparse.Namespace) -> dict[str, list[dict]]:
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    device = "cpu" if args.cpu_check else "cuda"
    arch = check_arch() if args.cpu_check else GEMMA3_4B
    seq = min(args.seq, 64) if args.cpu_check else args.seq
    name = "CPU check" if args.cpu_check else torch.cuda.get_device_name(0)
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    configs = arms()
    names = args.arms.split(",") if args.arms else list(configs)
    with tempfile.TemporaryDirectory(dir=args.workdir) as checkpoint:
        started = time.perf_counter()
        with torch.device(device):
            model = Gemma3ForConditionalGeneration(Gemma3Config(**arch)).to(torch.bfloat16)
        total = sum(p.numel() for p in model.parameters())
        model.save_pretrained(checkpoint)  # from_pretrained is the path QLoRA quantizes on
        del model
        print(f"{name}: random Gemma 3 ({total / 1e9:.2f} B parameters) built in {time.perf_counter() - started:.0f} s")
        results = interleaved(
            names, args.repeats, lambda n: gpu_arm(configs[n], checkpoint, arch, args.steps, seq, device)
        )
    print(
        f"\n{args.steps} steps of {SAMPLES_PER_STEP} x {seq} tokens, {args.repeats} interleaved repeats (min / median / max)\n"
    )
    print("| arm | settings | tokens/s/GPU | MFU % (median) | trainable M | peak GiB |")
    print("|---|---|---|---|---|---|")
    for n in names:
        runs = results[n]
        mfu = statistics.median(r["flops_per_s"] for r in runs) / (peak * 1e12) * 100 if peak else float("nan")
        print(
            f"| {n} | {describe(configs[n], runs[0]['weights'])} | {spread([r['tokens_per_s'] for r in runs])} | {mfu:.1f} | "
            f"{runs[0]['trainable_m']:.1f} | {max(r['memory_gib'] for r in runs):.1f} |"
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="the 4B-architecture GPU arms")
    parser.add_argument("--cpu-check", action="store_true", help="with --gpu: run its code path on CPU, tiny")
    parser.add_argument("--arms", help="comma-separated arm names (default: all)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps timed per arm (CPU 8, GPU 6)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats of each arm")
    parser.add_argument("--seq", type=int, default=768, help="GPU: tokens a sample (256 of them image tokens)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="GPU: dense bf16 peak TFLOP/s for MFU")
    parser.add_argument("--workdir", default=None, help="GPU: where the random checkpoint is written")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    if args.gpu:
        args.steps = args.steps or 6
        results = run_gpu(args)
    else:
        args.steps = args.steps or 8
        results = run_cpu(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
