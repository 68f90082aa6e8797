"""A model's files once per revision and once per node (trainer/staging.py), with the real huggingface_hub client
against a Hub stand-in and the real pyarrow GCS client against fake-gcs-server: the first run of a revision
downloads from the Hub and stages a copy under its storage; a later run on new nodes reads only the bucket; a
node that holds the copy reads nothing; a half-staged copy is never used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.hub_models import FakeModelHub

REPO = "google/gemma-3-4b-it"
FILES = {
    "config.json": json.dumps({"model_type": "gemma3"}).encode(),
    "model-00001-of-00002.safetensors": os.urandom(3 * 1024 * 1024 + 7),
    "model-00002-of-00002.safetensors": os.urandom(1024 * 1024),
    "tokenizer.json": b"{}",
    "README.md": b"not fetched: from_pretrained does not read it",
}
ON_NODE = """
import json, sys
from functions.core.config import ModelSpec
from trainer import staging
source, origin = staging.on_node(ModelSpec(id=sys.argv[1]), sys.argv[2], stages=sys.argv[3] == "1")
staging.finish()
print(json.dumps([source, origin]))
"""


def node(tmp_path: Path, name: str, hub: FakeModelHub, storage: str, stages: bool, model: str = REPO):
    """One node's local rank 0: its own local SSD (HF_HOME), the Hub stand-in, the GCS emulator."""
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / name / "hf"),
        "HF_ENDPOINT": hub.url,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HOME": str(tmp_path / name),
    }
    return subprocess.Popen(
        [sys.executable, "-c", ON_NODE, model, storage, "1" if stages else "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(proc) -> tuple[str, str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return tuple(json.loads(out.strip().splitlines()[-1]))


def weights_bytes() -> int:
    return sum(len(data) for name, data in FILES.items() if name != "README.md")


@pytest.fixture
def hub():
    server = FakeModelHub(REPO, FILES)
    yield server
    server.shutdown()


def test_the_first_run_stages_the_revision_and_later_runs_read_the_bucket_or_their_node(tmp_path, bucket, hub):
    storage = f"gs://{bucket}/checkpoints"
    # A cold revision on two new nodes: each downloads from the Hub once; global rank 0 stages a copy. The other
    # node looks first: started together, it read rank 0's copy whenever rank 0 had staged it by then (rightly).
    other = finished(node(tmp_path, "a1", hub, storage, stages=False))
    origins = [finished(node(tmp_path, "a0", hub, storage, stages=True)), other]
    assert [origin.split(",")[0] for _, origin in origins] == ["from the Hub", "from the Hub"]
    assert hub.served_bytes == 2 * weights_bytes(), "README.md and the like are not fetched"
    staged = f"gs://{bucket}/checkpoints/_models/{REPO}/{hub.commit}"
    assert origins[0][1] == f"from the Hub, staging a copy as {staged}"
    for source, _ in origins:
        assert {p.name for p in Path(source).iterdir()} >= set(FILES) - {"README.md"}
        for name, data in FILES.items():
            if name != "README.md":
                assert (Path(source) / name).read_bytes() == data
    # The next run on two new nodes: the bucket only, nothing from the Hub.
    served = hub.served_bytes
    second = [finished(node(tmp_path, f"b{i}", hub, storage, stages=i == 0)) for i in range(2)]
    assert {origin for _, origin in second} == {f"from the staged copy {staged}"}
    assert hub.served_bytes == served
    assert (Path(second[1][0]) / "model-00001-of-00002.safetensors").read_bytes() == FILES[
        "model-00001-of-00002.safetensors"
    ]
    # Again on a node that holds the copy: nothing is read (the Hub is asked only for the commit).
    again = finished(node(tmp_path, "b0", hub, storage, stages=True))
    assert again == (second[0][0], "from this node's cache") and hub.served_bytes == served


def test_a_half_staged_copy_is_not_used_and_a_damaged_node_copy_is_fetched_again(tmp_path, bucket, hub):
    from google.cloud import storage as gcs

    storage = f"gs://{bucket}/checkpoints"
    prefix = f"checkpoints/_models/{REPO}/{hub.commit}"
    client = gcs.Client()
    # files of a stage that died before its marker
    client.bucket(bucket).blob(f"{prefix}/config.json").upload_from_string(b"{}")
    source, origin = finished(node(tmp_path, "n", hub, storage, stages=False))
    assert origin == "from the Hub" and hub.served_bytes == weights_bytes()
    # a node copy cut short (a pod killed mid-download) is not whole: fetched again, from the Hub here
    shard = Path(source) / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    source, origin = finished(node(tmp_path, "n", hub, storage, stages=False))
    assert origin == "from the Hub" and shard.read_bytes() == FILES["model-00001-of-00002.safetensors"]


@pytest.mark.parametrize("marker", [b'{"files": ["config.json"]}', b'{"files": {"config.json": "two"}}', b"{"])
def test_a_staged_copy_with_a_malformed_marker_is_not_used(tmp_path, bucket, hub, marker):
    from google.cloud import storage as gcs

    from trainer.staging import MARKER

    storage = f"gs://{bucket}/checkpoints"
    prefix = f"checkpoints/_models/{REPO}/{hub.commit}"
    gcs.Client().bucket(bucket).blob(f"{prefix}/{MARKER}").upload_from_string(marker)
    source, origin = finished(node(tmp_path, "n", hub, storage, stages=False))
    assert origin == "from the Hub" and hub.served_bytes == weights_bytes()
    assert (Path(source) / "model-00002-of-00002.safetensors").read_bytes() == FILES["model-00002-of-00002.safetensors"]


def test_a_staged_copy_that_lost_a_file_under_its_marker_is_replaced_from_the_hub(tmp_path, bucket, hub):
    from google.cloud import storage as gcs

    storage = f"gs://{bucket}/checkpoints"
    staged = f"gs://{bucket}/checkpoints/_models/{REPO}/{hub.commit}"
    finished(node(tmp_path, "a", hub, storage, stages=True))
    client_bucket = gcs.Client().bucket(bucket)
    prefix = staged.removeprefix(f"gs://{bucket}/")
    client_bucket.blob(f"{prefix}/model-00002-of-00002.safetensors").delete()  # a lifecycle rule, a person
    client_bucket.blob(f"{prefix}/stray.bin").upload_from_string(b"not named by the marker")
    served = hub.served_bytes
    source, origin = finished(node(tmp_path, "b", hub, storage, stages=True))
    assert origin == f"from the Hub, staging a copy as {staged}" and hub.served_bytes == served + weights_bytes()
    assert (Path(source) / "model-00002-of-00002.safetensors").read_bytes() == FILES["model-00002-of-00002.safetensors"]
    assert not (Path(source) / "stray.bin").exists()
    # staged again: the next run on a new node reads the bucket, and only the files its marker names
    source, origin = finished(node(tmp_path, "c", hub, storage, stages=True))
    assert origin == f"from the staged copy {staged}" and hub.served_bytes == served + weights_bytes()
    assert not (Path(source) / "stray.bin").exists()


def test_a_gs_model_folder_is_copied_to_the_node_once(tmp_path, bucket, hub):
    from google.cloud import storage as gcs

    client = gcs.Client()
    for name, data in FILES.items():
        client.bucket(bucket).blob(f"models/mine/{name}").upload_from_string(data)
    model = f"gs://{bucket}/models/mine"
    source, origin = finished(node(tmp_path, "n", hub, f"gs://{bucket}/checkpoints", stages=True, model=model))
    assert origin == "copied to this node" and (Path(source) / "README.md").read_bytes() == FILES["README.md"]
    again = finished(node(tmp_path, "n", hub, f"gs://{bucket}/checkpoints", stages=True, model=model))
    assert again == (source, "from this node's cache")


def test_a_local_runs_storage_gets_no_second_copy_the_machines_cache_keeps_it(tmp_path, hub):
    """A workstation run's storage is a local folder: the model is downloaded once into this machine's cache
    and reused from there; nothing is staged beside the checkpoints."""
    storage = str(tmp_path / "checkpoints")
    source, origin = finished(node(tmp_path, "n", hub, storage, stages=True))
    assert origin == "from the Hub" and not (tmp_path / "checkpoints").exists()
    assert finished(node(tmp_path, "n", hub, storage, stages=True)) == (source, "from this node's cache")
    assert hub.served_bytes == weights_bytes()
