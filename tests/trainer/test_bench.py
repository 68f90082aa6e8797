"""The trainer benchmark's logic, small: the CPU table for two arms and the GPU code path on CPU
(bench/gpu.sh runs it on a real GPU; this keeps a typo from costing that run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def bench():
    spec = importlib.util.spec_from_file_location("trainer_throughput", ROOT / "bench" / "trainer_throughput.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["trainer_throughput"] = module
    spec.loader.exec_module(module)
    return module


def test_the_arms_are_the_reference_the_default_and_each_lever():
    arms = bench().arms()
    reference, default = arms["reference"], arms["default"]
    assert (reference.model.quantization, reference.training.gradient_checkpointing) == ("nf4", True)
    assert (default.model.quantization, default.training.gradient_checkpointing) == ("none", False)
    for name, cfg in arms.items():
        if name.startswith("lever: "):
            changed = [s for s in ("model", "lora", "training") if getattr(cfg, s) != getattr(reference, s)]
            assert len(changed) == 1, name  # one lever at a time


def test_cpu_table_and_gpu_code_path(capsys, tmp_path):
    module = bench()
    assert module.main(["--steps", "1", "--repeats", "2", "--arms", "reference,default"]) == 0
    table = capsys.readouterr().out
    # labelled by what ran: on CPU every arm computes in fp32 (the default's bf16 is a GPU setting)
    assert "| reference | nf4/fp32 eager 1x4 ckpt=on save=2 all-loss |" in table
    assert "| default | fp32 sdpa 4x1 ckpt=off save=0 answer-loss |" in table
    assert (
        module.main(
            [
                "--gpu",
                "--cpu-check",
                "--steps",
                "1",
                "--repeats",
                "1",
                "--arms",
                "reference,default",
                "--workdir",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert "| default | bf16 sdpa 4x1 ckpt=off save=0 answer-loss |" in capsys.readouterr().out


def test_flops_count_both_towers_their_attention_and_recomputation():
    module = bench()
    plain = module.flops_per_sample(module.GEMMA3_4B, 392, checkpointing=False)
    recomputed = module.flops_per_sample(module.GEMMA3_4B, 392, checkpointing=True)
    # ~3.9 B text parameters (with lm_head) x 392 tokens and ~0.41 B vision x 4,096 patches, forward 2N, backward 2N:
    weights = 2 * 2 * (3.88e9 * 392 + 0.411e9 * 4096)
    # the vision tower's self-attention over 4,096 patches: 4 n^2 d x 27 layers forward, x3 with its backward
    vision_attention = 3 * 4 * 4096**2 * 1152 * 27
    assert plain == pytest.approx(weights + vision_attention, rel=0.01)
    assert plain == pytest.approx(19.1e12, rel=0.01)
    forward = weights / 2 + vision_attention / 3
    assert recomputed == pytest.approx(plain + forward, rel=0.01)
    # TRL's fused head scores only the labelled positions: the reference's ~135 text tokens of 392 (the image's
    # 256 soft tokens are masked); a trained head (modules_to_save) adds its weight gradient there.
    head = 2 * 2560 * 262208
    scored = module.flops_per_sample(module.GEMMA3_4B, 392, checkpointing=False, scored=135)
    assert plain - scored == pytest.approx(2 * head * (392 - 135), rel=0.001)
    assert scored == pytest.approx(18.45e12, rel=0.01)
    trained = module.flops_per_sample(module.GEMMA3_4B, 392, False, scored=135, head_trained=True)
    assert trained - scored == pytest.approx(head * 135, rel=0.001)


def test_collator_bench_runs(capsys):
    spec = importlib.util.spec_from_file_location("collator_bench", ROOT / "bench" / "collator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--repeats", "1", "--steps", "2", "--workers", "1", "--step-ms", "10"]) == 0
    out = capsys.readouterr().out
    assert "collator at 896 px" in out and "| dataloader workers=1 |" in out
