"""Training data: a dataset by hub id, a local or gs:// parquet location, or the synthetic tiny://products,
kept Arrow-backed (memory-mapped, images decoded on access) instead of a per-worker list of PIL images."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from functions.core.config import DatasetSpec, PromptSpec

LOCAL_CACHE = Path(os.environ.get("RAYTUNE_DATA_CACHE", "/mnt/local-ssd/raytune-data"))


def _parquet_files(location: str) -> list[str]:
    """Local parquet files for a local folder/file or a gs:// prefix (copied once per node, under a lock)."""
    if not location.startswith("gs://"):
        path = Path(location)
        return sorted(str(p) for p in path.rglob("*.parquet")) if path.is_dir() else [str(path)]
    import pyarrow.fs as pafs
    from filelock import FileLock

    cache_root = LOCAL_CACHE if LOCAL_CACHE.parent.exists() else Path(tempfile.gettempdir()) / "raytune-data"
    target = cache_root / hashlib.sha256(location.encode()).hexdigest()[:16]
    target.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / ".complete").exists():
            fs, path = pafs.FileSystem.from_uri(location)
            if fs.get_file_info(path).type == pafs.FileType.File:
                pafs.copy_files(path, str(target / Path(path).name), source_filesystem=fs)
            else:
                pafs.copy_files(path, str(target), source_filesystem=fs)
            (target / ".complete").touch()
    return sorted(str(p) for p in target.rglob("*.parquet"))


def load(spec: DatasetSpec, seed: int = 0):
    import datasets

    if spec.id.startswith("tiny://"):
        from trainer import tiny

        dataset = tiny.product_dataset(spec.max_samples or 64, seed=seed)
    elif spec.id.startswith(("gs://", "/")):
        dataset = datasets.load_dataset("parquet", data_files=_parquet_files(spec.id), split="train")
    else:
        dataset = datasets.load_dataset(spec.id, split=spec.split, token=os.environ.get("HF_TOKEN"))
    missing = {spec.product_field, spec.category_field, spec.answer_field, spec.image_field} - set(dataset.column_names)
    if missing:
        raise ValueError(f"dataset {spec.id} lacks the columns {sorted(missing)} (has {dataset.column_names})")
    if spec.max_samples and len(dataset) > spec.max_samples:
        dataset = dataset.select(range(spec.max_samples))
    return dataset


def split(dataset, fraction: float, seed: int):
    """(train, eval or None): the same split on every worker (seeded)."""
    if not fraction:
        return dataset, None
    parts = dataset.train_test_split(test_size=fraction, seed=seed)
    return parts["train"], parts["test"]


def to_messages(row: dict, spec: DatasetSpec, prompts: PromptSpec) -> list[dict]:
    """One sample as a chat: system, user (prompt + image), assistant (the description)."""
    user = prompts.user.format(product=row[spec.product_field], category=row[spec.category_field])
    return [
        {"role": "system", "content": [{"type": "text", "text": prompts.system}]},
        {"role": "user", "content": [{"type": "text", "text": user}, {"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": row[spec.answer_field]}]},
    ]
