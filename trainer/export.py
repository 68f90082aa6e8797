"""export.merged: the adapter merged into its base model and saved as safetensors with the processor (a
folder vLLM and transformers load as a plain model); export.hub_repo: that folder pushed to the Hugging
Face Hub (HF_ENDPOINT, by default huggingface.co) as a private repo with the run's HF token, weights and
processor in one commit. The base is loaded again unquantized (a 4-bit base cannot take a merge)."""

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
    return target


def push(folder: Path, repo: str, message: str) -> str:
    """The folder as one commit to a private model repo (made if missing); returns the commit's id."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=os.environ.get("HF_TOKEN") or None)
    api.create_repo(repo, private=True, exist_ok=True)
    revision = str(api.upload_folder(repo_id=repo, folder_path=folder, commit_message=message).oid)
    log.info("pushed the merged model to the Hub repo %s (private) at %s", repo, revision)
    return revision
