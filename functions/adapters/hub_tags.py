"""A nightly line's `champion` alias on the Hugging Face Hub: a tag of `export.hub_repo` on the commit the
champion's run pushed, moved with the Hub's own client (huggingface_hub's HfApi, imported only when a promotion
or a rollback moves it). Every night pushes to the repo's `main`, so `main` is the latest night; the tag is the
champion, what `from_pretrained(repo, revision="champion")` loads.

A Hub tag cannot be moved in place: it is deleted and made again on the new commit. Every call is idempotent (a
tag already on its commit is left alone; one a concurrent move made is read back and checked), so a tick retried
after a failure moves it once."""

from __future__ import annotations

import os

from functions.core import tracking

TIMEOUT_S = 10.0  # each Hub call's bound: huggingface_hub's own client waits without one (httpx timeout=None)


def _api(token: str | None):
    import huggingface_hub
    from huggingface_hub.utils import _http

    if not getattr(huggingface_hub.get_session(), "_raytune_bounded", False):

        def bounded():  # the library's own client (its hooks, redirects), with a timeout on every call
            client = _http.default_client_factory()
            client.timeout = TIMEOUT_S
            client._raytune_bounded = True
            return client

        huggingface_hub.set_client_factory(bounded)
    return huggingface_hub.HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token or None)


def champion_commit(repo: str, token: str | None) -> str | None:
    """The commit the repo's champion tag is on (None: no such tag)."""
    return _tagged(_api(token), repo)


def _tagged(api, repo: str) -> str | None:
    refs = api.list_repo_refs(repo)
    return next((ref.target_commit for ref in refs.tags if ref.name == tracking.CHAMPION_ALIAS), None)


def move_champion(repo: str, revision: str, run_id: str, token: str | None) -> str:
    """The champion tag of `repo` moved onto `revision` (the commit run `run_id` pushed); the commit it is on."""
    from huggingface_hub.errors import HfHubHTTPError

    api = _api(token)
    current = _tagged(api, repo)
    if current == revision:
        return revision
    if current is not None:
        try:
            api.delete_tag(repo, tag=tracking.CHAMPION_ALIAS)
        except HfHubHTTPError as exc:  # deleted meanwhile by another move: made again below
            if exc.response is None or exc.response.status_code != 404:
                raise
    api.create_tag(
        repo,
        tag=tracking.CHAMPION_ALIAS,
        revision=revision,
        tag_message=f"raytune: champion is run {run_id}",
        exist_ok=True,  # made meanwhile: read back below
    )
    now = _tagged(api, repo)
    if now != revision:
        raise RuntimeError(f"the champion tag of {repo} is on {now}, not {revision}: another move raced this one")
    return revision
