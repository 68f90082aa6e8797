"""The preflight against the real huggingface_hub client with no Hub to answer (a closed port): a model that is
not cached here fails the run at once, one line, instead of after every worker restart; a cached one goes ahead."""

from __future__ import annotations

import socket

import pytest

from functions.core.config import DatasetSpec, ModelSpec
from trainer import preflight


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connections are refused
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "hub"


def test_an_unreachable_hub_and_no_cached_copy_fail_fast(no_hub):
    with pytest.raises(preflight.PreflightError, match=r"the Hugging Face Hub did not answer .* not in the cache"):
        preflight.check(ModelSpec(id="google/gemma-3-4b-it"), DatasetSpec(id="tiny://products"))


def test_a_cached_model_goes_ahead_without_the_hub(no_hub, caplog):
    repo = no_hub / "models--google--gemma-3-4b-it"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    (repo / "snapshots" / "0123abcd" / "config.json").write_text("{}")
    preflight.check(ModelSpec(id="google/gemma-3-4b-it"), DatasetSpec(id="tiny://products"))
    assert "using the cached copy" in caplog.text
