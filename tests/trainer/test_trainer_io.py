"""The trainer's inputs and outputs apart from a Ray run: parquet datasets, the completion notice."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from functions.core.config import DatasetSpec
from trainer import data, tiny
from trainer.train import notify


def test_parquet_folder_loads_lazily_with_the_expected_columns(tmp_path):
    folder = tmp_path / "products"
    folder.mkdir()
    tiny.product_dataset(10, seed=3).to_parquet(str(folder / "part-0.parquet"))
    tiny.product_dataset(6, seed=4).to_parquet(str(folder / "part-1.parquet"))
    dataset = data.load(DatasetSpec(id=str(folder), max_samples=12))
    assert len(dataset) == 12
    row = dataset[0]
    assert row["image"].size == (tiny.IMAGE_SIZE, tiny.IMAGE_SIZE)  # decoded on access, not held as a list
    assert set(dataset.column_names) >= {"Product Name", "Category", "description", "image"}


def test_dataset_without_the_configured_columns_is_a_clear_error_naming_the_field_to_set(tmp_path):
    path = tmp_path / "p.parquet"
    tiny.product_dataset(2).rename_column("description", "desc").to_parquet(str(path))
    with pytest.raises(ValueError) as raised:
        data.load(DatasetSpec(id=str(path)))
    said = str(raised.value)
    assert "lacks the column 'description' (dataset.answer_field)" in said, said
    assert said.endswith(": set dataset.answer_field: desc"), said
    with pytest.raises(ValueError, match=r"lacks the columns 'title' \(dataset.product_field\)"):
        data.load(DatasetSpec(id=str(path), product_field="title"))


def test_completion_notice_reaches_the_watch_topic(pubsub, monkeypatch):
    topic = pubsub.topic("watch")
    subscription = pubsub.subscribe(topic)
    monkeypatch.setenv("RAYTUNE_WATCH_TOPIC", topic)
    notify("run-1", "succeeded")
    [message] = pubsub.pull(subscription)
    assert json.loads(message.data) == {"kind": "finished", "run_id": "run-1", "outcome": "succeeded"}


def test_completion_notice_failure_does_not_fail_the_job(monkeypatch, caplog):
    monkeypatch.setenv("RAYTUNE_WATCH_TOPIC", "projects/p/topics/t")
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr("trainer.train.NOTICE_TIMEOUT_S", 2)
    notify("run-1", "failed")
    assert "completion notice to projects/p/topics/t failed" in caplog.text


def test_a_finished_driver_leaves_with_its_code_and_all_it_wrote(tmp_path):
    """`leave` skips the interpreter's teardown, not the output: what was printed or logged without a flush is out,
    and the exit code is the run's."""
    script = (
        "import logging, sys; from trainer.train import leave\n"
        f"logging.basicConfig(filename={str(tmp_path / 'driver.log')!r})\n"
        "logging.getLogger('x').warning('logged last')\n"
        "sys.stdout.write('{\"summary\": true}'); sys.stderr.write('said last')\n"
        "leave(3)\n"
        "print('never')\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=root)
    assert (done.returncode, done.stdout, done.stderr) == (3, '{"summary": true}', "said last")
    assert "logged last" in (tmp_path / "driver.log").read_text()
