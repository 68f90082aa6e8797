"""Training data: a dataset by hub id, a local or gs:// parquet location, or the synthetic tiny://products,
kept Arrow-backed (memory-mapped, images decoded on access) instead of a per-worker list of PIL images."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from functions.core.config import DATA_FILE_SUFFIX, SAVED_MARKERS, DatasetSpec, PromptSpec
from trainer import storage


class DataError(ValueError):
    """What is wrong with a dataset, said naming it (and the row, file and column where it is one row)."""


LOCAL_CACHE = Path(os.environ.get("RAYTUNE_DATA_CACHE", "/mnt/local-ssd/raytune-data"))


def _node_copy(location: str) -> Path:
    """A gs:// dataset on this node's disk: its parquet shards, or every file of a saved dataset, copied once per
    node and listing (under a lock), so a shard added to the prefix, or rewritten, is fetched by the next run.
    Returns the local folder (or file)."""
    import pyarrow.fs as pafs
    from filelock import FileLock

    fs, path = storage.filesystem(location.rstrip("/"))
    info = fs.get_file_info(path)
    listed = [info] if info.type == pafs.FileType.File else fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = [f for f in listed if f.type == pafs.FileType.File]
    saved = any(f.path.removeprefix(path).lstrip("/") in SAVED_MARKERS for f in files)
    shards = sorted((f.path, f.size, f.mtime_ns) for f in files if saved or f.path.endswith(DATA_FILE_SUFFIX))
    if not shards:
        raise DataError(f"no {DATA_FILE_SUFFIX} files (nor a dataset saved with save_to_disk) at {location}")
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
    return target if info.type != pafs.FileType.File else target / Path(path).name


def _saved(path: Path, spec: DatasetSpec):
    """A dataset saved with save_to_disk, or None when the folder is not one; a DatasetDict gives `spec.split`."""
    import datasets

    if not path.is_dir() or not any((path / marker).is_file() for marker in SAVED_MARKERS):
        return None
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if spec.split not in loaded:
            raise DataError(f"dataset {spec.id} (saved with save_to_disk) has no split {spec.split!r}: {list(loaded)}")
        return loaded[spec.split]
    return loaded


# Local datasets in the layouts `datasets` loads itself (docs/datasets.md): data files of one kind, or an image
# folder with a metadata file. gs:// locations hold parquet shards (copied to the node, fingerprinted nightly).
FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
METADATA = ("metadata.jsonl", "metadata.csv", "metadata.parquet")


def _local(location: str, spec: DatasetSpec):
    """A local file or folder as a dataset, and the folder its relative image paths start from."""
    import datasets

    path = Path(location)
    if not path.exists():
        raise DataError(f"dataset {location} does not exist")
    if (saved := _saved(path, spec)) is not None:
        return saved, path, []
    if path.is_dir() and any((path / name).exists() for name in METADATA):
        return datasets.load_dataset("imagefolder", data_dir=str(path), split="train"), path, []
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.suffix in FORMATS)
    kinds = {FORMATS.get(f.suffix) for f in files}
    if not files or None in kinds:
        raise DataError(
            f"dataset {location}: no data files of a known kind ({', '.join(FORMATS)}, an image folder with "
            f"{' / '.join(METADATA)}, or a dataset saved with save_to_disk); see docs/datasets.md"
        )
    if len(kinds) > 1:
        raise DataError(f"dataset {location} mixes {sorted(k for k in kinds if k)} files: keep one kind")
    dataset = datasets.load_dataset(kinds.pop(), data_files=[str(f) for f in files], split="train")
    return dataset, path if path.is_dir() else path.parent, [str(f) for f in files]


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
        raise DataError(
            f"dataset {spec.id}: column {field!r} holds {feature}, not images (image bytes, "
            f"{{bytes, path}} structs, or paths/URLs): {err}"
        ) from err


def load(spec: DatasetSpec, seed: int = 0):
    dataset, base, _ = _read(spec, seed)
    return _with_images(dataset, spec, base)


def _read(spec: DatasetSpec, seed: int = 0):
    """The dataset as read (images not cast yet), the folder relative image paths start from, and its parquet
    files in row order (to name the file a row came from; empty when it did not come from parquet files)."""
    import datasets

    base, files = None, []
    if spec.id.startswith("tiny://"):
        from trainer import tiny

        dataset = tiny.product_dataset(spec.max_samples or 64, seed=seed)
    elif spec.id.startswith("gs://"):
        copied = _node_copy(spec.id)
        dataset = _saved(copied, spec)
        if dataset is None:
            files = sorted(str(p) for p in copied.rglob(f"*{DATA_FILE_SUFFIX}")) if copied.is_dir() else [str(copied)]
            dataset = datasets.load_dataset("parquet", data_files=files, split="train")
    elif spec.id.startswith("/"):
        dataset, base, files = _local(spec.id, spec)
    else:
        dataset = datasets.load_dataset(spec.id, split=spec.split, token=os.environ.get("HF_TOKEN"))
    if missing := _missing_columns(spec, list(dataset.column_names)):
        raise DataError(f"dataset {spec.id} {missing}")
    if spec.max_samples and len(dataset) > spec.max_samples:
        dataset = dataset.select(range(spec.max_samples))
    return dataset, base, [f for f in files if f.endswith(DATA_FILE_SUFFIX)]


FIELDS = ("product_field", "category_field", "answer_field", "image_field")


def _missing_columns(spec: DatasetSpec, columns: list[str]) -> str | None:
    """What the dataset lacks of the columns the config names, each with the field to set: the one column no other
    field takes where there is one, else the closest by name."""
    import difflib

    named = {field: getattr(spec, field) for field in FIELDS}
    lacking = [field for field, column in named.items() if column not in columns]
    if not lacking:
        return None
    free = [c for c in columns if c not in named.values()]
    hints = []
    for field in lacking:
        close = free if len(free) == 1 and len(lacking) == 1 else difflib.get_close_matches(named[field], free, 1, 0.4)
        if close:
            hints.append(f"set dataset.{field}: {close[0]}")
    said = ", ".join(f"{named[f]!r} (dataset.{f})" for f in lacking)
    return f"lacks the column{'s' * (len(lacking) > 1)} {said}; it has {columns}" + (
        f": {'; '.join(hints)}" if hints else ""
    )


CHECK_BATCH = 512  # rows read at a time: the image bytes of one batch are in memory at once


def check_rows(spec: DatasetSpec, threads: int = 8) -> int:
    """Read the whole dataset as the trainer will and check every row before any worker starts: its text
    columns hold text and its image decodes whole (every pixel: a JPEG cut short has a valid header and fails
    only at its missing rows), in parallel. A bad row would otherwise fail the training minutes later, on every
    worker restart, naming no row. Raises DataError naming the row (counting from 0), its file (where the data
    came from files) and the column; returns the number of rows checked."""
    import datasets

    try:
        dataset, base, files = _read(spec)
        raw = _with_images(dataset, spec, base).cast_column(spec.image_field, datasets.Image(decode=False))
    except DataError:
        raise
    except Exception as err:  # the loader's own errors (a folder of the wrong kind, a corrupt or empty file)
        raise DataError(f"dataset {spec.id} cannot be read: {type(err).__name__}: {err}") from err
    where = _row_files(files)
    texts = (spec.product_field, spec.category_field, spec.answer_field)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for start in range(0, len(raw), CHECK_BATCH):
            batch = raw[start : start + CHECK_BATCH]
            for field in texts:
                for offset, value in enumerate(batch[field]):
                    if not isinstance(value, str) or not value.strip():
                        raise DataError(f"{_row(spec, where, start + offset)}, column {field!r} is {value!r}, not text")
            problems = pool.map(_image_problem, batch[spec.image_field])
            for offset, problem in enumerate(problems):
                if problem is not None:
                    raise DataError(f"{_row(spec, where, start + offset)}, column {spec.image_field!r}: {problem}")
    return len(raw)


def _image_problem(image: dict | None) -> str | None:
    """Why an image (as stored: {bytes, path}) would not open, or None."""
    from io import BytesIO

    from PIL import Image

    if not image or (image.get("bytes") is None and not image.get("path")):
        return "no image"
    source = BytesIO(image["bytes"]) if image.get("bytes") is not None else image["path"]
    try:
        with Image.open(source) as opened:
            opened.load()  # decoded whole, as the collator will: a truncated file fails here, not in training
    except Exception as err:
        said = " ".join(str(err).replace(repr(source), "").split()).rstrip(": ") or "not an image"
        what = f"image {image['path']}" if image.get("path") else "the image bytes stored in the row"
        return f"{what}: {type(err).__name__}: {said}"
    return None


def _row_files(files: list[str]) -> list[tuple[int, str]]:
    """(first row, file) of each parquet file, in row order."""
    import pyarrow.parquet as pq

    starts, row = [], 0
    for file in files:
        starts.append((row, file))
        row += pq.ParquetFile(file).metadata.num_rows
    return starts


def _row(spec: DatasetSpec, where: list[tuple[int, str]], index: int) -> str:
    found = [(start, file) for start, file in where if start <= index]
    if not found:
        return f"dataset {spec.id}: row {index} (counting from 0)"
    start, file = found[-1]
    return f"dataset {spec.id}: row {index} (counting from 0; row {index - start} of {Path(file).name})"


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
        raise DataError(
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
