"""Dataset versions for the nightly fingerprint, and the trainer reading a gs:// prefix that grows: a Hub
stand-in for dataset revisions, fake-gcs-server for shards (pyarrow's GCS client through the emulator)."""

from __future__ import annotations

import pytest

from functions.adapters import datasets
from functions.core.config import DatasetSpec
from tests.fakes.http import serve_in_thread
from tests.fakes.hub import FakeHubUploads
from tests.integration.test_functions import upload
from trainer import data, tiny

TOKEN = "hf_revisiontesttoken0123456789"


@pytest.fixture
def hub(monkeypatch):
    server = FakeHubUploads(token=TOKEN)
    serve_in_thread(server)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.shutdown()


def test_hub_dataset_revision_is_its_version(hub):
    hub.datasets["org/products"] = "abc123"
    hub.failing.append(503)  # one transient failure, retried
    found, why = datasets.versions(DatasetSpec(id="org/products"), TOKEN)
    assert found == [("hf://datasets/org/products", "abc123")] and why is None
    assert hub.seen[-1] == ("/api/datasets/org/products/revision/main", f"Bearer {TOKEN}") and len(hub.seen) == 2


@pytest.mark.parametrize("hub_has", ["another token's", "nothing", "no revision in its answer"])
def test_a_hub_dataset_without_a_revision_trains_and_says_why(hub, hub_has):
    if hub_has == "another token's":  # a gated or private dataset this token may not read: 401
        hub.token = "hf_someoneElsesToken0123456789"
    if hub_has != "nothing":
        hub.datasets["org/private"] = "abc123" if hub_has == "another token's" else None
    found, why = datasets.versions(DatasetSpec(id="org/private"), TOKEN)
    assert found is None and "the Hub did not give the revision of org/private" in why
    assert TOKEN not in why


def test_gcs_prefix_versions_are_the_shards_generations(bucket):
    first = upload(bucket, "data/products/part-0.parquet", b"PAR1")
    upload(bucket, "data/products/_SUCCESS", b"")
    upload(bucket, "data/products-old/part-0.parquet", b"PAR1")  # a sibling prefix, not this dataset
    found, _ = datasets.versions(DatasetSpec(id=f"gs://{bucket}/data/products"))
    assert found == [(f"gs://{bucket}/data/products/part-0.parquet", str(first))]


def test_trainer_reads_new_shards_of_a_gcs_prefix(bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(data, "LOCAL_CACHE", tmp_path / "ssd" / "raytune-data")
    (tmp_path / "ssd").mkdir()
    shard = tmp_path / "part.parquet"
    tiny.product_dataset(10, seed=1).to_parquet(str(shard))
    upload(bucket, "shards/part-0.parquet", shard.read_bytes())
    spec = DatasetSpec(id=f"gs://{bucket}/shards")
    assert len(data.load(spec)) == 10
    tiny.product_dataset(6, seed=2).to_parquet(str(shard))
    upload(bucket, "shards/part-1.parquet", shard.read_bytes())
    assert len(data.load(spec)) == 16, "the new shard is read, not the first night's cached copy"
    assert len(list((tmp_path / "ssd" / "raytune-data").glob("*/*"))) == 1, "older copies are dropped"


def test_a_bucket_the_controller_cannot_list_trains_and_says_why(gcs_emulator):
    found, why = datasets.versions(DatasetSpec(id="gs://raytune-no-such-bucket-4711/products"))
    assert found is None and why.startswith("cannot list gs://raytune-no-such-bucket-4711/products")


def test_a_dataset_saved_with_save_to_disk_on_gcs_is_read_and_versioned_whole(bucket, tmp_path, monkeypatch):
    """Issue 40: a folder written by save_to_disk (state.json, dataset_info.json and .arrow files) under a gs://
    prefix: the trainer copies all of it and reads it with load_from_disk, the preflight checks every row, and
    its version is every file's generation (a rewritten .arrow file is a new nightly's data)."""
    monkeypatch.setattr(data, "LOCAL_CACHE", tmp_path / "ssd" / "raytune-data")
    (tmp_path / "ssd").mkdir()
    saved = tmp_path / "saved"
    tiny.product_dataset(12, seed=3).save_to_disk(str(saved))
    for file in sorted(saved.rglob("*")):
        if file.is_file():
            upload(bucket, f"saved/products/{file.relative_to(saved)}", file.read_bytes())
    spec = DatasetSpec(id=f"gs://{bucket}/saved/products")
    assert len(data.load(spec)) == 12 and data.check_rows(spec) == 12
    found, _ = datasets.versions(spec)
    names = {name.rsplit("/", 1)[1] for name, _ in found}
    assert {"state.json", "dataset_info.json"} <= names and any(n.endswith(".arrow") for n in names)
