"""The model's files, once per model revision and once per node.

A hub model is downloaded from the Hub by the first run of its revision only: that run stages the snapshot
under the run's storage (`<storage_path>/_models/<repo>/<commit>/`, next to the checkpoints, where the
trainer may write), and a marker written last says the copy is whole. Every later run copies it from there
(the bucket is in the cluster's region, read in parallel ranges), and a node that already holds it (its
local SSD cache, HF_HOME) reads nothing at all. A gs:// model folder is copied to the node the same way.

On each node one worker (local rank 0) fetches while the others wait at a barrier: the bytes cross the
network once per node."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from functions.core.config import ModelSpec

log = logging.getLogger("raytune.trainer")
MARKER = "_raytune_staged.json"  # written last: the files, each with its size
CHUNK = 64 * 1024 * 1024  # a range read in one request
STREAMS = 16  # ranges read at once
# Only what from_pretrained reads: weights (safetensors), configs, the tokenizer and processor files.
PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]


def node_cache() -> Path:
    """Where a node keeps model copies: its local SSD (HF_HOME on GKE), else the user's HF cache."""
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "raytune-models"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _whole(folder: Path) -> bool:
    """A local copy is usable once its marker is there and every file it names has its size."""
    marker = folder / MARKER
    if not marker.exists():
        return False
    files = json.loads(marker.read_text())["files"]
    return all((folder / name).is_file() and (folder / name).stat().st_size == size for name, size in files.items())


def commit_of(spec: ModelSpec) -> str | None:
    """The Hub commit the spec's revision names; None when the Hub cannot say (offline): loaded as before."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return None
    from huggingface_hub import HfApi

    try:
        return HfApi().model_info(spec.id, revision=spec.revision, token=os.environ.get("HF_TOKEN") or None).sha
    except Exception as exc:  # the preflight has judged the repository; the Hub's load path reports the rest
        log.warning("cannot resolve %s@%s to a commit, loading from the Hub: %s", spec.id, spec.revision, exc)
        return None


def stage_uri(storage_path: str, repo: str, commit: str) -> str:
    return f"{storage_path.rstrip('/')}/_models/{repo}/{commit}"


def fetch(uri: str, target: Path, only: dict[str, int] | None = None) -> dict[str, int]:
    """Copy a gs:// or local model folder to `target` (`only`: those of its files, as a staged copy's marker
    names them), each file read in CHUNK ranges, STREAMS at once. Returns the files copied and their sizes."""
    import pyarrow.fs as pafs

    from trainer.storage import filesystem

    fs, root = filesystem(uri.rstrip("/"))
    listing = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    files = {
        info.path[len(root) :].lstrip("/"): info.size
        for info in listing
        if info.type == pafs.FileType.File and not info.path.endswith(MARKER)
    }
    if only is not None:
        files = {name: size for name, size in files.items() if name in only}
    with contextlib.ExitStack() as opened, ThreadPoolExecutor(STREAMS, thread_name_prefix="model-fetch") as pool:
        pieces = []
        for name, size in files.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            out = opened.enter_context(open(target / name, "wb"))
            out.truncate(size)
            # one handle a file on each side: pyarrow's read_at and os.pwrite are safe from many threads
            source = opened.enter_context(fs.open_input_file(f"{root}/{name}"))
            pieces += [(source, out.fileno(), offset, min(CHUNK, size - offset)) for offset in range(0, size, CHUNK)]

        def copy(piece: tuple[Any, int, int, int]) -> None:
            source, fd, offset, length = piece
            os.pwrite(fd, source.read_at(length, offset), offset)

        list(pool.map(copy, pieces))
    return files


def upload(folder: Path, uri: str, files: dict[str, int]) -> None:
    """Stage a downloaded snapshot: the files first, the marker last (a reader never sees half a copy)."""
    import pyarrow.fs as pafs

    from trainer.storage import filesystem

    fs, root = filesystem(uri.rstrip("/"))
    fs.create_dir(root, recursive=True)

    def put(name: str) -> None:
        pafs.copy_files(str(folder / name), f"{root}/{name}", destination_filesystem=fs)

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="model-stage") as pool:
        list(pool.map(put, files))
    with fs.open_output_stream(f"{root}/{MARKER}") as out:
        out.write(_marker(files))


def _marker(files: dict[str, int]) -> bytes:
    return json.dumps({"files": files}).encode()


def _mark(folder: Path, files: dict[str, int]) -> None:
    (folder / MARKER).write_bytes(_marker(files))


def _from_hub(spec: ModelSpec, commit: str, target: Path) -> dict[str, int]:
    from huggingface_hub import snapshot_download

    snapshot_download(
        spec.id, revision=commit, local_dir=target, allow_patterns=PATTERNS, token=os.environ.get("HF_TOKEN") or None
    )
    shutil.rmtree(target / ".cache", ignore_errors=True)  # huggingface_hub's own bookkeeping
    return {
        str(path.relative_to(target)): path.stat().st_size
        for path in sorted(target.rglob("*"))
        if path.is_file() and path.name != MARKER
    }


def on_node(spec: ModelSpec, storage_path: str | None, stages: bool) -> tuple[str, str]:
    """Make the model's files local on this node (the caller is its local rank 0); returns (folder or hub id,
    where the files came from, for people). `stages`: this worker (global rank 0) uploads a snapshot fetched
    from the Hub to the bucket of `storage_path`, so the next run of this revision reads it there instead."""
    if spec.id.startswith("gs://"):
        folder = node_cache() / "gs" / _digest(spec.id)
        with _held(folder):
            if _whole(folder):
                return str(folder), "from this node's cache"
            shutil.rmtree(folder, ignore_errors=True)
            _mark(folder, fetch(spec.id, folder))
            return str(folder), "copied to this node"
    if spec.id.startswith("/"):
        return spec.id, "a folder on this machine"
    if (commit := commit_of(spec)) is None:
        return spec.id, "from the Hub (its commit unknown: neither cached nor staged)"
    folder = node_cache() / "hub" / spec.id / commit
    # Staged only where other machines read it, a bucket: a local run's storage is on this machine, whose cache
    # already keeps the copy (a second copy in the workdir would only double 8.6 GB on its disk).
    bucket = storage_path if storage_path and storage_path.startswith("gs://") else None
    with _held(folder):
        return _hub_on_node(spec, bucket, commit, folder, stages and bucket is not None)


def _held(folder: Path) -> Any:
    """One fetch of a folder at a time on a machine (local Ray nodes share one; a GKE node's workers share its
    disk): the next finds the copy whole."""
    from filelock import FileLock

    folder.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{folder}.lock")


def _hub_on_node(spec: ModelSpec, bucket: str | None, commit: str, folder: Path, stages: bool) -> tuple[str, str]:
    if _whole(folder):
        return str(folder), "from this node's cache"
    shutil.rmtree(folder, ignore_errors=True)
    staged = stage_uri(bucket, spec.id, commit) if bucket else None
    if staged and (expected := _staged(staged)) is not None:
        if _copied_whole(staged, folder, expected):
            _mark(folder, expected)
            return str(folder), f"from the staged copy {staged}"
        # Files deleted or rewritten under its marker (by hand, a lifecycle rule): never trained from; the Hub's
        # copy replaces it, and is staged again.
        log.warning("the staged %s is not the copy its marker names; downloading from the Hub", staged)
        shutil.rmtree(folder, ignore_errors=True)
    files = _from_hub(spec, commit, folder)
    _mark(folder, files)
    if stages and staged:  # in the background: this run trains meanwhile; the job waits for it before it ends
        thread = threading.Thread(target=_stage, args=(spec, commit, folder, staged, files), name="model-stage")
        thread.start()
        _staging.append(thread)
    return str(folder), "from the Hub" + (f", staging a copy as {staged}" if stages and staged else "")


_staging: list[threading.Thread] = []  # uploads still running in this worker


def _stage(spec: ModelSpec, commit: str, folder: Path, staged: str, files: dict[str, int]) -> None:
    try:
        upload(folder, staged, files)
        log.info("staged %s@%s as %s", spec.id, commit, staged)
    except Exception as exc:  # the run goes on from its own copy; the next one downloads from the Hub again
        log.warning("cannot stage %s@%s under %s: %s", spec.id, commit, staged, exc)


def finish(timeout_s: float = 1800) -> None:
    """Wait for this worker's background staging (a worker that exits would cut it short, and a copy without
    its marker is never used, so the next run would download from the Hub again)."""
    deadline = time.monotonic() + timeout_s
    while _staging:
        _staging.pop().join(max(0.0, deadline - time.monotonic()))


def _copied_whole(uri: str, folder: Path, expected: dict[str, int]) -> bool:
    """Copy a staged folder to the node; whether it held exactly the files its marker names."""
    try:
        return fetch(uri, folder, only=expected) == expected
    except OSError as exc:  # a file that went between the listing and its read
        log.warning("cannot copy the staged %s: %s", uri, exc)
        return False


def _staged(uri: str) -> dict[str, int] | None:
    """The files (and sizes) a staged copy's marker names; None when it has no readable marker."""
    from trainer.storage import filesystem

    fs, root = filesystem(uri)
    try:
        with fs.open_input_stream(f"{root}/{MARKER}") as marker:
            files = json.loads(marker.read())["files"]
        return {str(name): int(size) for name, size in files.items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("the staged %s has an unreadable marker (%s): not used", uri, exc)
        return None


def shared(spec: ModelSpec, storage_path: str | None, context: Any) -> tuple[str, str]:
    """on_node for every worker of a node. Returns (source for from_pretrained, where it came from)."""
    return once_per_node(context, lambda: on_node(spec, storage_path, stages=context.get_world_rank() == 0))


def once_per_node(context: Any, make: Callable[[], tuple[str, str]]) -> tuple[str, str]:
    """`make` run by the node's local rank 0 while the node's other workers wait; every worker gets its node's
    answer (gathered by all ranks, each takes its own node's)."""
    import torch.distributed as dist

    made: tuple[str, str] | None = make() if context.get_local_rank() == 0 else None
    if not (dist.is_available() and dist.is_initialized()):
        assert made is not None, "a single worker is its node's local rank 0"
        return made
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (context.get_node_rank(), made))
    return next(answer for node, answer in gathered if node == context.get_node_rank() and answer is not None)
