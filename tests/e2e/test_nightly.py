"""Nightly fine-tunes on the embedded local default, three nights in one workdir: the first trains and
evaluates against the base model, the second has nothing new and is SKIPPED without a cluster, the third
finds a new shard, warm-starts from the champion, evaluates against it and is promoted or not, as the
rule says; the line's `champion` alias follows in MLflow's registry and as a tag of the Hub repo each trained
night pushes its merged model to. The report is opened in headless Chromium where the machine has it, and its HTML is parsed
with every image decoded in any case. As a person running them one after another would, the nights share the
Ray head the first one leaves warm (`--keep-warm`), and `raytune local --stop` ends it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.http import serve_in_thread
from tests.fakes.hub import FakeHubUploads
from tests.reports import ReportPage, in_browser
from trainer import tiny

RAYTUNE = str(Path(sys.executable).parent / "raytune")
pytestmark = pytest.mark.slow


HUB_TOKEN = "hf_nightlyWriteToken0123456789ab"
HUB_REPO = "team/nightly-products"


def night(workdir: Path, config: Path, date: str, home: Path, hub: FakeHubUploads) -> tuple[dict, str]:
    proc = subprocess.run(
        [
            RAYTUNE,
            "local",
            "--workdir",
            str(workdir),
            "--json",
            "--keep-warm",
            "600",
            "--nightly",
            "--night",
            date,
            config,
        ],
        cwd=home,
        env={**os.environ, "HOME": str(home), **hub_env(hub)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert HUB_TOKEN not in proc.stdout + proc.stderr
    return json.loads(proc.stdout), proc.stderr


def hub_env(hub: FakeHubUploads) -> dict[str, str]:
    """The Hub the nights push to and the token they push and tag with (the trainer's and the controller's)."""
    return {"HF_ENDPOINT": hub.url, "HF_TOKEN": HUB_TOKEN}


def check_report(path: Path, samples: int, tmp_path: Path) -> None:
    page = ReportPage(path.read_text())
    assert {"summary", "metrics", "samples"} <= set(page.ids)
    assert len(page.images) == samples  # each decoded
    dom = in_browser(path, tmp_path)
    if dom is not None:  # as a person opens it
        assert dom.count("<img") == samples and "rougeL (decides)" in dom


def test_three_nights(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shards = tmp_path / "products"
    shards.mkdir()
    tiny.product_dataset(24, seed=1).to_parquet(str(shards / "part-0.parquet"))
    config = tmp_path / "nightly.json"
    config.write_text(
        json.dumps(
            {
                "name": "nightly-products",
                "model": {"id": "tiny://gemma3", "dtype": "float32"},
                "dataset": {"id": str(shards), "eval_fraction": 0.25},
                "training": {
                    "epochs": 4,
                    "learning_rate": 0.01,
                    "per_device_batch_size": 4,  # one node: the batches two workers of 2 would take
                    "optim": "adamw_torch",
                    "max_length": 256,
                    "logging_steps": 2,
                    "init_adapter": "champion",
                },
                "scaling": {"nodes": 1, "gpus_per_node": 0, "max_failures": 1},
                "cluster": {"dependencies": "image"},
                "evaluation": {"samples": 3, "max_new_tokens": 16},
                # The embedded default's MLflow store (the workdir's SQLite file): each night a tracked run, and
                # the line's `champion` alias follows its champions in MLflow's Model Registry.
                "tracking": {"mlflow": {}},
                # Each trained night pushes its merged model to the Hub repo's main; the repo's `champion` tag
                # follows the champions.
                "export": {"merged": True, "hub_repo": HUB_REPO},
            }
        )
    )
    workdir = tmp_path / "w"
    hub = FakeHubUploads(token=HUB_TOKEN)
    serve_in_thread(hub)
    try:
        three_nights(workdir, config, home, shards, tmp_path, hub)
    finally:
        hub.shutdown()
        stopped = subprocess.run(
            [RAYTUNE, "local", "--stop", "--workdir", str(workdir)], capture_output=True, text=True, timeout=120
        )
    assert stopped.returncode == 0, stopped.stderr
    assert not (workdir / "logs" / "session.json").exists()


def three_nights(workdir: Path, config: Path, home: Path, shards: Path, tmp_path: Path, hub: FakeHubUploads) -> None:
    first, err = night(workdir, config, "2026-12-01", home, hub)
    assert first["run_id"] == "nightly-20261201" and first["state"] == "SUCCEEDED"
    evaluation = first["result"]["evaluation"]
    assert evaluation["baseline_kind"] == "base" and evaluation["samples"] == 3
    assert first["result"]["init_adapter"] is None, "no champion yet: a fresh adapter"
    promotion = first["promotion"]
    assert promotion["promoted"], promotion  # 4 epochs at 1e-2 learn the template: far above the base model
    assert promotion["champion_run_id"] == "nightly-20261201" and "of the base model" in promotion["reason"]
    assert "champion: promoted" in err
    check_report(Path(evaluation["report_path"]), 3, tmp_path)
    store = f"sqlite:///{(workdir / 'mlflow.db').resolve()}"
    assert f"mlflow ui --backend-store-uri {store}" in err, "the one command that opens the store's UI"
    assert champion_alias(store) == ("nightly-20261201", first["result"]["tracking"]["mlflow"]["run_id"])
    assert "champion alias -> mlflow model nightly-products version 1" in err
    pushed = first["result"]["hub_revision"]
    assert hub.repos[HUB_REPO].commits[-1].oid == pushed and hub.repos[HUB_REPO].tags == {"champion": pushed}
    assert f"hub {HUB_REPO} tag champion on {pushed[:12]}" in err

    logged = len((workdir / "logs" / "controller.log").read_text())
    second, err = night(workdir, config, "2026-12-02", home, hub)
    assert second["state"] == "SKIPPED" and second["settled"]
    assert [h["state"] for h in second["history"]] == ["RECEIVED", "SKIPPED"]
    assert "nothing new since nightly-20261201" in second["reason"]
    assert second["inputs"]["fingerprint"] == first["inputs"]["fingerprint"]
    assert "event -> local/run-events: run-finished" in err
    assert err.count("nothing new since nightly-20261201") == 1, err  # the reason once, in the summary
    assert err.count("SKIPPED") == 1, err
    tonight = (workdir / "logs" / "controller.log").read_text()[logged:]
    assert "worker nodes" not in tonight and not (workdir / "checkpoints" / "nightly-20261202").exists(), (
        "no cluster work"
    )

    tiny.product_dataset(16, seed=2).to_parquet(str(shards / "part-1.parquet"))  # new data arrives
    third, err = night(workdir, config, "2026-12-03", home, hub)
    assert "reusing the warm local Ray cluster an earlier run left" in err, "the first night's head, still warm"
    assert third["state"] == "SUCCEEDED" and third["inputs"]["dataset_objects"] == 2
    assert third["inputs"]["fingerprint"] != first["inputs"]["fingerprint"]
    assert third["result"]["init_adapter"] == first["result"]["adapter_path"], "warm start from the champion"
    evaluation = third["result"]["evaluation"]
    assert evaluation["baseline_kind"] == "champion" and evaluation["champion_run_id"] == "nightly-20261201"
    verdict = third["promotion"]
    won = evaluation["challenger"]["rougeL"] - evaluation["baseline"]["rougeL"] > 0
    assert verdict["promoted"] == won, verdict
    assert verdict["champion_run_id"] == ("nightly-20261203" if won else "nightly-20261201")
    assert ("champion: promoted" if won else "champion: not promoted") in err
    check_report(Path(evaluation["report_path"]), 3, tmp_path)
    # The alias follows the champion pointer whichever way the night went; every night a run of its own.
    crowned = third if won else first
    assert champion_alias(store) == (crowned["run_id"], crowned["result"]["tracking"]["mlflow"]["run_id"])
    assert len(tracked_nights(store)) == 2, "the skipped night trained nothing and tracks nothing"
    assert len(hub.repos[HUB_REPO].commits) == 2, "each trained night pushed; main is the latest"
    assert hub.repos[HUB_REPO].tags == {"champion": crowned["result"]["hub_revision"]}, "the tag is the champion"
    assert not hub.refused, hub.refused
    rolled_back(workdir, store, first, third, won, hub)


def rolled_back(workdir: Path, store: str, first: dict, third: dict, won: bool, hub: FakeHubUploads) -> None:
    """`raytune champion RUN --rollback`: the line's champion before it is the champion again, and the alias
    follows it at once; a champion that replaced none has nothing to roll back to."""
    champion = third if won else first
    proc = subprocess.run(
        [RAYTUNE, "champion", champion["run_id"], "--rollback", "--workdir", str(workdir)],
        env={**os.environ, **hub_env(hub)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not won:
        assert proc.returncode == 2 and "replaced no champion" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert "nightly-20261201 again" in proc.stdout and "mlflow model nightly-products version 1" in proc.stdout
    assert champion_alias(store) == (first["run_id"], first["result"]["tracking"]["mlflow"]["run_id"])
    assert hub.repos[HUB_REPO].tags == {"champion": first["result"]["hub_revision"]}, "the Hub's tag went back too"
    assert f"hub {HUB_REPO} tag champion on {first['result']['hub_revision'][:12]}" in proc.stdout
    pointer = next((workdir / "gcs").rglob("champions/nightly-products/*.json"))
    assert json.loads(pointer.read_text())["run_id"] == "nightly-20261201"


def champion_alias(store: str) -> tuple[str, str]:
    """The raytune run and the tracked run the line's champion alias points at, as MLflow's client reads them."""
    from mlflow.tracking import MlflowClient

    version = MlflowClient(store, registry_uri=store).get_model_version_by_alias("nightly-products", "champion")
    return version.tags["raytune.run_id"], version.run_id


def tracked_nights(store: str) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("nightly-products")
    return [run.data.tags["raytune.run_id"] for run in client.search_runs([experiment.experiment_id])]
