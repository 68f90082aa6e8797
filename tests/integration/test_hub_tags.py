"""A line's `champion` alias on the Hugging Face Hub: the tag of `export.hub_repo` on the champion's commit,
moved with huggingface_hub's own HfApi against a Hub stand-in that keeps tags as the Hub does (a tag is never
moved in place: 409 on one that exists), read back with the same client's `list_repo_refs`."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from functions.adapters import hub_tags
from functions.core.config import RunConfig
from functions.core.result import RunResult
from functions.handlers.lineage import Aliased
from tests.fakes.http import serve_in_thread
from tests.fakes.hub import Commit, FakeHubUploads, Repo

TOKEN = "hf_tagWriteToken0123456789abcdef"
REPO = "team/nightly-products"


@pytest.fixture
def hub(monkeypatch):
    server = FakeHubUploads(token=TOKEN)
    server.repos[REPO] = Repo(private=True, commits=[Commit(f"night {n}", {}, f"{n:040x}") for n in (1, 2, 3)])
    serve_in_thread(server)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.shutdown()


def oid(night: int) -> str:
    return f"{night:040x}"


def test_the_champion_tag_moves_to_each_champion_and_back(hub):
    from huggingface_hub import HfApi

    assert hub_tags.champion_commit(REPO, TOKEN) is None
    assert hub_tags.move_champion(REPO, oid(1), "nightly-1", TOKEN) == oid(1)
    assert hub_tags.move_champion(REPO, oid(1), "nightly-1", TOKEN) == oid(1), "again: nothing changes"
    assert hub_tags.move_champion(REPO, oid(3), "nightly-3", TOKEN) == oid(3)
    refs = HfApi(endpoint=hub.url, token=TOKEN).list_repo_refs(REPO)
    assert [(t.name, t.target_commit) for t in refs.tags] == [("champion", oid(3))]
    assert [b.target_commit for b in refs.branches] == [oid(3)], "main is the latest night, not the champion"
    assert hub_tags.move_champion(REPO, oid(1), "nightly-1", TOKEN) == oid(1)  # a rollback
    assert hub_tags.champion_commit(REPO, TOKEN) == oid(1)
    assert not hub.refused, hub.refused


def test_a_tag_a_concurrent_move_left_is_replaced(hub):
    hub.repos[REPO].tags["champion"] = oid(2)  # another instance's move, or a person's
    assert hub_tags.move_champion(REPO, oid(3), "nightly-3", TOKEN) == oid(3)
    assert hub.repos[REPO].tags == {"champion": oid(3)}


def test_aliased_says_where_the_alias_went_and_never_raises(hub):
    cfg = RunConfig.model_validate({"name": "nightly-products", "export": {"merged": True, "hub_repo": REPO}})
    pushed = RunResult(hub_repo=REPO, hub_revision=oid(2))
    said, error = Aliased(cfg, pushed, TOKEN).move("nightly-2", "gs://runs/checkpoints/nightly-2/adapter", pushed)
    assert said == f"hub {REPO} tag champion on {oid(2)[:12]}" and error is None
    assert hub.repos[REPO].tags == {"champion": oid(2)}
    # A wrong token: the alias stays where it was, the error says why without the token, nothing raises.
    said, error = Aliased(cfg, pushed, "hf_wrongToken0123456789abcdef").move(
        "nightly-3", None, RunResult(hub_repo=REPO, hub_revision=oid(3))
    )
    assert said is None and error is not None and error.startswith("hub: ") and "401" in error
    assert "hf_wrongToken" not in error and hub.repos[REPO].tags == {"champion": oid(2)}
    # A run pushed to another repo (the config's hub_repo changed since): that repo's tag is not this line's.
    other = RunResult(hub_repo="team/elsewhere", hub_revision=oid(3))
    assert Aliased(cfg, other, TOKEN).move("nightly-3", None, other) == (None, None)


def test_a_hub_that_never_answers_fails_the_move_within_its_bound(monkeypatch):
    """huggingface_hub's own client waits forever by default (httpx timeout=None); the controller's tick may not."""
    hold = threading.Event()

    class Silent(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hold.wait(30)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    serve_in_thread(server)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(hub_tags, "TIMEOUT_S", 0.5)
    import huggingface_hub

    huggingface_hub.close_session()  # a session made with another bound before
    started = time.monotonic()
    try:
        with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
            hub_tags.champion_commit(REPO, TOKEN)
    finally:
        hold.set()
        server.shutdown()
        huggingface_hub.close_session()
    assert time.monotonic() - started < 20  # huggingface_hub retries a timeout itself, each try bounded
