"""export.merged: the adapter merged into its base model and saved as safetensors with the processor (a
folder vLLM and transformers load as a plain model); export.hub_repo: pushed to the Hugging Face Hub
as a private repo with the run's HF token. The base is loaded again unquantized (a 4-bit base cannot
take a merge)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from functions.core.config import RunConfig

log = logging.getLogger("raytune.trainer")
MERGED_DIR = "merged"


def merged(adapter: Path, base_source: str, cfg: RunConfig, target: Path) -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    token = os.environ.get("HF_TOKEN") or None
    base = AutoModelForImageTextToText.from_pretrained(
        base_source, revision=cfg.model.revision, dtype=getattr(torch, cfg.model.dtype), token=token
    )
    model = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    model.save_pretrained(target, safe_serialization=True)
    processor = AutoProcessor.from_pretrained(adapter)
    processor.save_pretrained(target)
    if cfg.export.hub_repo:
        log.info("pushing the merged model to the Hub repo %s (private)", cfg.export.hub_repo)
        model.push_to_hub(cfg.export.hub_repo, private=True, token=token)
        processor.push_to_hub(cfg.export.hub_repo, private=True, token=token)
    return target
