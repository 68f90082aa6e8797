"""Training data: a dataset by hub id, a local or gs:// parquet location, or the synthetic tiny://products,
kept Arrow-backed (memory-mapped, images decoded on access) instead of a per-worker list of PIL images."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from functions.core.config import DATA_FILE_SUFFIX, DatasetSpec, PromptSpec
from trainer import storage

LOCAL_CACHE = Path(os.environ.get("RAYTUNE_DATA_CACHE", "/mnt/local-ssd/raytune-data"))


def _parquet_files(location: str) -> list[str]:
    """Local parquet files for a local folder/file or a gs:// prefix: copied once per node and listing (under
    a lock), so a shard added to the prefix, or rewritten, is fetched by the next run."""
    if not location.startswith("gs://"):
        path = Path(location)
        return sorted(str(p) for p in path.rglob(f"*{DATA_FILE_SUFFIX}")) if path.is_dir() else [str(path)]
    import pyarrow.fs as pafs
    from filelock import FileLock

    fs, path = storage.filesystem(location.rstrip("/"))
    info = fs.get_file_info(path)
    listed = [info] if info.type == pafs.FileType.File else fs.get_file_info(pafs.FileSelector(path, recursive=True))
    shards = sorted((f.path, f.size, f.mtime_ns) for f in listed if f.path.endswith(DATA_FILE_SUFFIX))
    if not shards:
        raise ValueError(f"no {DATA_FILE_SUFFIX} files at {location}")
    cache_root = LOCAL_CACHE if LOCAL_CACHE.parent.exists() else Path(tempfile.gettempdir()) / "raytune-data"
    home = cache_root / hashlib.sha256(location.encode()).hexdigest()[:16]
    target = home / hashlib.sha256(repr(shards).encode()).hexdigest()[:16]
    home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home) + ".lock"):
        if not (target / ".complete").exists():
            for older in home.iterdir():  # earlier listings of this location: the node's disk is not a museum
                shutil.rmtree(older, ignore_errors=True)
            target.mkdir()
            for shard, _, _ in shards:
                name = shard.removeprefix(path).lstrip("/") or Path(shard).name
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                pafs.copy_files(shard, str(target / name), source_filesystem=fs)
            (target / ".complete").touch()
    return sorted(str(p) for p in target.rglob(f"*{DATA_FILE_SUFFIX}"))


# Local datasets in the layouts `datasets` loads itself (docs/datasets.md): data files of one kind, or an image
# folder with a metadata file. gs:// locations hold parquet shards (copied to the node, fingerprinted nightly).
FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
METADATA = ("metadata.jsonl", "metadata.csv", "metadata.parquet")


def _local(location: str):
    """A local file or folder as a dataset, and the folder its relative image paths start from."""
    import datasets

    path = Path(location)
    if not path.exists():
        raise ValueError(f"dataset {location} does not exist")
    if path.is_dir() and any((path / name).exists() for name in METADATA):
        return datasets.load_dataset("imagefolder", data_dir=str(path), split="train"), path
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.suffix in FORMATS)
    kinds = {FORMATS.get(f.suffix) for f in files}
    if not files or None in kinds:
        raise ValueError(
            f"dataset {location}: no data files of a known kind ({', '.join(FORMATS)}, or an image folder with "
            f"{' / '.join(METADATA)}); see docs/datasets.md"
        )
    if len(kinds) > 1:
        raise ValueError(f"dataset {location} mixes {sorted(k for k in kinds if k)} files: keep one kind")
    dataset = datasets.load_dataset(kinds.pop(), data_files=[str(f) for f in files], split="train")
    return dataset, path if path.is_dir() else path.parent


def _with_images(dataset, spec: DatasetSpec, base: Path | None):
    """The image column as images, decoded on access, whatever it held: images already, {bytes, path} structs (a
    parquet written by pyarrow or pandas), bytes, or paths (relative to the data file's folder) and URLs."""
    import datasets

    field = spec.image_field
    feature = dataset.features[field]
    if isinstance(feature, datasets.Image):
        return dataset
    if isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string"):

        def resolved(row: dict) -> dict:
            where = row[field]
            if where and base is not None and "://" not in where and not os.path.isabs(where):
                where = str(base / where)
            return {field: where}

        dataset = dataset.map(resolved, desc="image paths")
    import pyarrow as pa

    try:
        return dataset.cast_column(field, datasets.Image())
    except (TypeError, ValueError, pa.ArrowException) as err:
        raise ValueError(
            f"dataset {spec.id}: column {field!r} holds {feature}, not images (image bytes, "
            f"{{bytes, path}} structs, or paths/URLs): {err}"
        ) from err


def load(spec: DatasetSpec, seed: int = 0):
    import datasets

    base = None
    if spec.id.startswith("tiny://"):
        from trainer import tiny

        dataset = tiny.product_dataset(spec.max_samples or 64, seed=seed)
    elif spec.id.startswith("gs://"):
        dataset = datasets.load_dataset("parquet", data_files=_parquet_files(spec.id), split="train")
    elif spec.id.startswith("/"):
        dataset, base = _local(spec.id)
    else:
        dataset = datasets.load_dataset(spec.id, split=spec.split, token=os.environ.get("HF_TOKEN"))
    missing = {spec.product_field, spec.category_field, spec.answer_field, spec.image_field} - set(dataset.column_names)
    if missing:
        raise ValueError(f"dataset {spec.id} lacks the columns {sorted(missing)} (has {dataset.column_names})")
    if spec.max_samples and len(dataset) > spec.max_samples:
        dataset = dataset.select(range(spec.max_samples))
    return _with_images(dataset, spec, base)


def check_rows(spec: DatasetSpec, rows: int = 4) -> None:
    """Load the dataset as the trainer will and decode its first rows: a format, column or image the training
    would fail on, minutes later and on every worker restart, as one ValueError naming the row and column."""
    dataset = load(spec)
    for index in range(min(rows, len(dataset))):
        try:
            row = dataset[index]
            row[spec.image_field].convert("RGB")
        except Exception as err:
            raise ValueError(
                f"dataset {spec.id}: row {index}, column {spec.image_field!r}: {type(err).__name__}: {err}"
            ) from err
        for field in (spec.product_field, spec.category_field, spec.answer_field):
            if not isinstance(row[field], str) or not row[field].strip():
                raise ValueError(f"dataset {spec.id}: row {index}, column {field!r} is {row[field]!r}, not text")


def held_out_rank(key: object) -> float:
    """Where a sample's key falls in [0, 1): stable across runs, machines and Python versions."""
    return int.from_bytes(hashlib.sha256(str(key).encode()).digest()[:8], "big") / 2**64


def split(dataset, spec: DatasetSpec):
    """(train, eval or None): a sample is held out when its key hashes below eval_fraction, so the held-out
    set is the same on every worker and every night, and grows only by new samples as the data grows.
    The eval set is ordered by hash: its first N are the evaluation's samples, stable as data grows."""
    if not spec.eval_fraction:
        return dataset, None
    ranks = [held_out_rank(key) for key in dataset[spec.key_field or spec.product_field]]
    held = sorted((i for i, rank in enumerate(ranks) if rank < spec.eval_fraction), key=ranks.__getitem__)
    kept = [i for i, rank in enumerate(ranks) if rank >= spec.eval_fraction]
    if not held or not kept:
        raise ValueError(
            f"dataset.eval_fraction {spec.eval_fraction} of {len(ranks)} samples leaves "
            f"{len(kept)} to train on and {len(held)} to evaluate: both must be at least 1"
        )
    return dataset.select(kept), dataset.select(held)


def prompt_messages(product: str, category: str, prompts: PromptSpec) -> list[dict]:
    """The question of a sample: system, user (prompt + image)."""
    user = prompts.user.format(product=product, category=category)
    return [
        {"role": "system", "content": [{"type": "text", "text": prompts.system}]},
        {"role": "user", "content": [{"type": "text", "text": user}, {"type": "image"}]},
    ]


def to_messages(row: dict, spec: DatasetSpec, prompts: PromptSpec) -> list[dict]:
    """One sample as a chat: the question, then the assistant's answer (the description)."""
    return [
        *prompt_messages(row[spec.product_field], row[spec.category_field], prompts),
        {"role": "assistant", "content": [{"type": "text", "text": row[spec.answer_field]}]},
    ]
