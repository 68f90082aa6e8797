"""Checks the job driver makes before any worker starts: what no retry can fix (a dataset or model that
does not exist, a gated model without a token, a GPU node whose driver cannot run the image's CUDA) fails the job
at once with one clear line, instead of restarting the worker group `scaling.max_failures` times."""

from __future__ import annotations

import logging
import os
import socket

from functions.core import gpu_driver
from functions.core.config import DatasetSpec, ModelSpec, ScalingSpec
from functions.core.gpu_support import torch_cuda
from functions.core.result import GPU_DRIVER_FILE, NODE_NAME_ENV, WORKER_RESOURCE_ENV, GpuDriverSeen

log = logging.getLogger("raytune.trainer")


class PreflightError(RuntimeError):
    """A run that cannot succeed as configured."""


def _exists(location: str) -> bool:
    if location.startswith("gs://"):
        import pyarrow.fs as pafs

        from trainer.storage import filesystem

        fs, path = filesystem(location.rstrip("/"))
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)
    return os.path.exists(location)


def _hub(kind: str, repo: str, revision: str | None) -> None:
    """A hub repository must exist and be readable with the token we have; network trouble is not a verdict."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    token = os.environ.get("HF_TOKEN") or None
    api = HfApi()
    try:
        if kind == "model":
            api.model_info(repo, revision=revision, token=token)
        else:
            api.dataset_info(repo, revision=revision, token=token)
    except GatedRepoError as err:
        hint = "accept its licence on the Hub with the token's account" if token else "set HF_TOKEN"
        raise PreflightError(f"{kind} {repo} is gated: {hint}") from err
    except RevisionNotFoundError as err:
        raise PreflightError(f"{kind} {repo} has no revision {revision}") from err
    except RepositoryNotFoundError as err:
        hint = "" if token else " (or it is private and HF_TOKEN is not set)"
        raise PreflightError(f"{kind} {repo} does not exist on the Hugging Face Hub{hint}") from err
    except Exception as err:
        # No answer from the Hub: fine if the files are cached here (a run on nodes that ran one); otherwise the
        # download would fail the same way after every restart, so the run ends now, saying so.
        if _cached(kind, repo, revision):
            log.warning("could not check %s %s on the Hub (%s); using the cached copy", kind, repo, err)
            return
        raise PreflightError(
            f"{kind} {repo}: the Hugging Face Hub did not answer ({type(err).__name__}) and it is not in the cache "
            f"here ({os.environ.get('HF_HOME') or '~/.cache/huggingface'}): check the network, or pre-load it"
        ) from err


def _cached(kind: str, repo: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    filename = "config.json" if kind == "model" else "README.md"
    found = try_to_load_from_cache(repo, filename, revision=revision, repo_type=kind)
    return isinstance(found, str)


def _source(kind: str, location: str, revision: str | None = None) -> None:
    if location.startswith("tiny://"):
        return  # built here; the config already admits only the built-in ids
    if location.startswith(("gs://", "/")):
        if not _exists(location):
            raise PreflightError(f"{kind} {location} does not exist")
    else:
        _hub(kind, location, revision)


def check(model: ModelSpec, dataset: DatasetSpec) -> None:
    _source("model", model.id, model.revision)
    _source("dataset", dataset.id)
    if dataset.id.startswith(("gs://", "/")):  # files of ours: their format and every row are checked here
        from trainer.data import DataError, check_rows

        try:
            check_rows(dataset)
        except DataError as err:
            raise PreflightError(str(err)) from err


DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
CUDA_PACKAGES = ("torch", "cuda-toolkit", "nvidia-cuda-runtime-cu12")  # what tells a torch build's CUDA


def node_driver(version_file: str = DRIVER_VERSION_FILE) -> tuple[str, dict[str, str], str]:
    """On a GPU node, in the image the workers run: the driver's version text, the packages that tell the CUDA
    the torch build needs (its metadata alone: torch is not imported), and the node's name."""
    from importlib import metadata

    try:
        with open(version_file) as found:
            text = found.read(4096)
    except OSError:
        text = ""
    packages = {}
    for name in CUDA_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return text, packages, os.environ.get(NODE_NAME_ENV) or socket.gethostname()


def driver_reading(text: str, packages: dict[str, str], node: str) -> GpuDriverSeen:
    """The reading as the run folder keeps it: the node, its driver, the image's CUDA, and why they disagree."""
    driver, cuda = gpu_driver.version(text), torch_cuda(packages)
    return GpuDriverSeen(
        node=node,
        driver=gpu_driver.shown(driver) if driver else None,
        cuda=f"{cuda[0]}.{cuda[1]}" if cuda else None,
        problem=gpu_driver.problem(cuda, driver),
    )


def gpu_driver_check(scaling: ScalingSpec, run_folder: str) -> GpuDriverSeen:
    """One task on one of the run's GPU nodes (its group's resource, one GPU of the run's accelerator) reads the
    node's driver and the image's CUDA, kept as <run folder>/gpu-driver.json (what `raytune doctor` reports for the
    node); a driver too old fails the job here, naming the node, before any worker starts CUDA."""
    import ray

    from trainer.storage import write_file

    resources = {own: 0.001} if (own := os.environ.get(WORKER_RESOURCE_ENV)) else {}
    task = ray.remote(node_driver).options(num_gpus=1, accelerator_type=scaling.accelerator, resources=resources)
    text, packages, node = ray.get(task.remote(DRIVER_VERSION_FILE))
    reading = driver_reading(text, packages, node)
    try:
        write_file(f"{run_folder}/{GPU_DRIVER_FILE}", reading.model_dump_json(indent=2).encode())
    except OSError as exc:  # the reading is for people; the check below is what protects the run
        log.warning("could not keep the GPU driver reading: %s", exc)
    if reading.problem:
        raise PreflightError(f"node {node}: {reading.problem}")
    log.info("GPU driver on %s: %s", node, " ".join(text.split()[:12]) or "not found on the node")
    return reading
