"""Checks the job driver makes before any worker starts: what no retry can fix (a dataset or model that
does not exist, a gated model without a token) fails the job at once with one clear line, instead of
restarting the worker group `scaling.max_failures` times."""

from __future__ import annotations

import logging
import os

from functions.core.config import DatasetSpec, ModelSpec

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
