"""`raytune generate`: a product description from a trained adapter, as `raytune local` or a cloud run
writes it (`adapter_path` in the run's result): the base model named in adapter_config.json (a hub id,
or the tiny model saved beside the adapter), the adapter, its processor and the run's prompts."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from functions.core.config import PromptSpec
from trainer.data import prompt_messages

PROMPTS_FILE = "raytune_prompts.json"


def base_model(adapter: Path) -> str:
    """The base the adapter was trained on: a hub id, or a folder relative to the adapter."""
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    return str((adapter / base).resolve()) if base.startswith(("./", "../")) else base


def is_toy(adapter: Path) -> bool:
    """Whether the adapter's base is the tiny Gemma 3 built offline (trainer/tiny.py), the only base a run keeps with
    its adapter (named relatively in adapter_config.json; any other base is a hub id or a path of the user's)."""
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    return str(base).startswith(("./", "../"))


def quiet_libraries() -> None:
    """What the libraries say that a person asking for one description does not need: bitsandbytes' import (the
    base loads unquantized: hidden as if not installed, with its note on a missing optional kernels package),
    transformers' progress bars and deprecation notices."""
    import warnings

    sys.modules.setdefault("bitsandbytes", None)  # type: ignore[arg-type]  # None: "not installed"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()


def answer(model, processor, prompts: PromptSpec, product: str, category: str, image, max_new_tokens: int) -> str:
    """The model's greedy description of one product (its image a PIL image)."""
    import torch

    text = processor.apply_chat_template(
        prompt_messages(product, category, prompts), add_generation_prompt=True, tokenize=False
    )
    device = next(model.parameters()).device
    inputs = processor(text=text, images=[image.convert("RGB")], return_tensors="pt").to(device)
    inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return str(processor.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)).strip()


def describe(adapter_path: str, image_path: str, product: str, category: str, max_new_tokens: int = 128) -> str:
    quiet_libraries()
    from peft import PeftModel
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    adapter = Path(adapter_path)
    prompts_file = adapter / PROMPTS_FILE
    prompts = PromptSpec.model_validate_json(prompts_file.read_text()) if prompts_file.exists() else PromptSpec()
    token = os.environ.get("HF_TOKEN") or None
    processor = AutoProcessor.from_pretrained(adapter)
    base = AutoModelForImageTextToText.from_pretrained(base_model(adapter), token=token)
    model = PeftModel.from_pretrained(base, adapter).eval()
    return answer(model, processor, prompts, product, category, Image.open(image_path), max_new_tokens)
