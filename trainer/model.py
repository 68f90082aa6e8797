"""The model and processor to fine-tune: a hub id or path (AutoModelForImageTextToText, optionally
4-bit NF4 / 8-bit through bitsandbytes) or the tiny Gemma 3 built offline; and the LoRA adapter config."""

from __future__ import annotations

import os
from typing import Any

from functions.core.config import TINY_MODEL as TINY
from functions.core.config import LoraSpec, ModelSpec, TrainingSpec


def resolve_source(spec: ModelSpec, folder: str) -> str:
    """Where from_pretrained loads the model and processor: the hub id or path, or for tiny://gemma3 the
    caller's folder, which the tiny model is saved to first so it loads through the same path (dtype,
    attention, quantization) as a hub model. Outside torch.distributed: under it only rank 0 saves
    (node_source)."""
    if spec.id != TINY:
        return spec.id
    from pathlib import Path

    from trainer import tiny

    return str(tiny.save(Path(folder)))


def node_source(spec: ModelSpec, storage_path: str | None, tiny_folder: str, context: Any) -> tuple[str, str]:
    """What a training worker loads from, and where its files came from. tiny://gemma3 is built on each node by
    its local rank 0 (transformers saves on rank 0 only) into a folder of the node's own while the node's other
    workers wait, so the driver never imports transformers for it; anything else is made local to the node by
    trainer/staging.py."""
    from trainer import staging

    if spec.id != TINY:
        return staging.shared(spec, storage_path, context)
    from pathlib import Path

    from trainer import tiny

    folder = Path(f"{tiny_folder}-node{context.get_node_rank()}")
    return staging.once_per_node(context, lambda: (str(tiny.save(folder)), "built on this node"))


def load_processor(spec: ModelSpec, source: str):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(
        source, revision=spec.revision, use_fast=True, token=os.environ.get("HF_TOKEN")
    )


def quantization_config(spec: ModelSpec):
    import torch
    from transformers import BitsAndBytesConfig

    dtype = getattr(torch, spec.dtype)
    if spec.quantization == "nf4":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=spec.double_quant,
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_quant_storage=dtype,
        )
    if spec.quantization == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


def load_model(spec: ModelSpec, source: str, device=None):
    """`device`: where a quantized model must be loaded (its worker's GPU); unquantized models are moved by
    the Trainer itself."""
    import torch
    from transformers import AutoModelForImageTextToText

    quantization = quantization_config(spec)
    model = AutoModelForImageTextToText.from_pretrained(
        source,
        revision=spec.revision,
        dtype=getattr(torch, spec.dtype),
        attn_implementation=spec.attn_implementation,
        quantization_config=quantization,
        token=os.environ.get("HF_TOKEN"),
        device_map={"": device} if quantization is not None and device is not None else None,
    )
    if quantization is not None and device is None:
        _keep_cpu_4bit_weights_trainable(model)
    return model


def _keep_cpu_4bit_weights_trainable(model) -> None:
    """bitsandbytes (0.50) repacks 4-bit weights for its fast CPU inference path the first time a layer runs
    in eval mode, and never unpacks them: training after an evaluation then fails ("a view of a leaf
    Variable ... in-place operation"). On CPU, keep every layer on the training layout. GPUs are unaffected."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


def lora_config(spec: LoraSpec):
    from peft import LoraConfig

    return LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        bias=spec.bias,
        target_modules=spec.target_modules,
        task_type="CAUSAL_LM",
        modules_to_save=list(spec.modules_to_save) or None,
    )


def init_adapter(spec: TrainingSpec, champion: dict | None) -> str | None:
    """The adapter to continue training from: training.init_adapter, "champion" resolved to the champion at
    submission (None when the config name has none yet: a fresh adapter)."""
    if spec.init_adapter != "champion":
        return spec.init_adapter
    return champion["adapter_path"] if champion else None


def warm_start(model, adapter: str):
    """The base model with an earlier adapter loaded trainable, in place of a fresh LoRA adapter."""
    from peft import PeftModel

    from trainer.storage import local_folder

    return PeftModel.from_pretrained(model, local_folder(adapter), is_trainable=True)
