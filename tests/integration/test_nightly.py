"""Nightly fine-tunes through functions-framework on the emulators: the dataset is a gs:// prefix of
parquet shards on fake-gcs-server, the champion and the last nightly's inputs are pointers in the bucket.
An unchanged night is SKIPPED without one Kubernetes call; a new shard trains, with the champion handed
to the trainer; the champion moves only to a better adapter."""

from __future__ import annotations

import json

import yaml

from functions.core import champion
from functions.core.config import RunConfig
from functions.core.result import CHAMPION_ENV
from functions.core.runs import State
from tests.fakes.http_events import post, pubsub_event
from tests.integration.test_functions import QUICK, upload, watch, write_result

DAY = 86400


def nightly_config(bucket: str) -> dict:
    return {
        **QUICK,
        "name": "nightly-shop",
        "dataset": {"id": f"gs://{bucket}/datasets/products", "eval_fraction": 0.25},
        "training": {"init_adapter": "champion"},
        "evaluation": {"samples": 4, "margin": 0.01},
    }


def night(h, server, bucket) -> str:
    body = {"config_uri": f"gs://{bucket}/library/nightly.json", "nightly": True}
    assert post(server["launch"], pubsub_event(body, when=h.clock())).status_code == 200
    return f"nightly-{h.clock():%Y%m%d}"


def finish(h, server, run_id: str, challenger: float, baseline: float, champion: str | None) -> None:
    adapter = f"gs://bucket/ckpt/{run_id}/checkpoint_3/adapter"
    evaluation = {
        "samples": 4,
        "challenger": {"rougeL": challenger, "bleu": 30.0, "eval_loss": 1.1},
        "baseline": {"rougeL": baseline, "bleu": 20.0, "eval_loss": 1.3},
        "baseline_kind": "champion" if champion else "base",
        "champion_run_id": champion,
        "report_path": adapter.replace("/adapter", "/report.html"),
    }
    write_result(h, run_id, adapter_path=adapter, evaluation=evaluation)
    h.kube.set_status("rayjobs", run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(server, {"kind": "finished", "run_id": run_id})


def champion_of(h, run_id: str):
    """The champion of the line the run belongs to (its config name, evaluated the same way)."""
    cfg = RunConfig.model_validate(h.ctx.store.get(run_id).config)
    return h.ctx.champions.get(champion.line(cfg))


def champion_env(h, run_id: str) -> dict | None:
    runtime = yaml.safe_load(h.kube.get("rayjobs", run_id)["spec"]["runtimeEnvYAML"])
    value = runtime["env_vars"].get(CHAMPION_ENV)
    return json.loads(value) if value else None


def test_nightly_trains_on_change_and_the_champion_moves_only_forward(controller, functions_server, bucket):
    h, server = controller, functions_server
    upload(bucket, "datasets/products/part-0.parquet", b"PAR1 shard 0")
    upload(bucket, "datasets/products/_SUCCESS", b"")  # not data: not in the fingerprint
    upload(bucket, "library/nightly.json", nightly_config(bucket))

    first = night(h, server, bucket)
    record = h.ctx.store.get(first)
    assert record.state == State.SUBMITTED and record.inputs.dataset_objects == 1
    assert champion_env(h, first) is None, "no champion yet: evaluated against the base model"
    finish(h, server, first, challenger=0.42, baseline=0.05, champion=None)
    record = h.ctx.store.get(first)
    assert record.state == State.SUCCEEDED and record.settled
    assert record.promotion.promoted and record.promotion.champion_run_id == first
    assert champion_of(h, first).run_id == first
    assert h.ctx.nightlies.get("nightly-shop").fingerprint == record.inputs.fingerprint
    [event] = h.finished_events()
    assert event["promotion"]["promoted"] and event["evaluation"]["challenger"]["rougeL"] == 0.42
    assert event["report_path"].endswith("/report.html")

    h.clock.advance(DAY)
    calls = len(h.kube.requests)
    second = night(h, server, bucket)
    record = h.ctx.store.get(second)
    assert record.state == State.SKIPPED and record.settled and f"nothing new since {first}" in record.reason
    assert len(h.kube.requests) == calls, "a skipped night makes no Kubernetes call"
    assert [e["state"] for e in h.finished_events()] == ["SUCCEEDED", "SKIPPED"]

    h.clock.advance(DAY)
    upload(bucket, "datasets/products/part-1.parquet", b"PAR1 shard 1")  # new data
    third = night(h, server, bucket)
    assert h.ctx.store.get(third).state == State.SUBMITTED
    held = champion_of(h, first)
    assert champion_env(h, third) == {"run_id": first, "adapter_path": held.adapter_path}
    finish(h, server, third, challenger=0.425, baseline=0.42, champion=first)  # better, but within the margin
    record = h.ctx.store.get(third)
    assert not record.promotion.promoted and "not above margin 0.01" in record.promotion.reason
    assert champion_of(h, first).run_id == first
    assert h.ctx.nightlies.get("nightly-shop").run_id == third, "trained on the new shard: the next baseline"

    h.clock.advance(DAY)
    upload(bucket, "datasets/products/part-1.parquet", b"PAR1 shard 1, rewritten")  # a new generation
    fourth = night(h, server, bucket)
    assert h.ctx.store.get(fourth).state == State.SUBMITTED
    finish(h, server, fourth, challenger=0.6, baseline=0.42, champion=first)
    assert h.ctx.store.get(fourth).promotion.promoted
    assert champion_of(h, first).previous_run_id == first


def test_a_night_whose_inputs_are_still_training_is_skipped(controller, functions_server, bucket):
    h, server = controller, functions_server
    upload(bucket, "datasets/products/part-0.parquet", b"PAR1 shard 0")
    upload(bucket, "library/nightly.json", nightly_config(bucket))
    first = night(h, server, bucket)
    h.kube.set_status("rayjobs", first, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    h.clock.advance(DAY)  # a long run: still training when the next night fires
    second = night(h, server, bucket)
    record = h.ctx.store.get(second)
    assert record.state == State.SKIPPED and f"{first} is still training the same inputs" in record.reason
    assert h.kube.names("rayjobs") == [first]


def test_a_config_reusing_the_name_with_its_own_dataset_cannot_take_over_the_champion(
    controller, functions_server, bucket
):
    """Issue 21: the champion was keyed by name alone, so a config with the same name, its own dataset and
    margin 0 took the champion over by winning on its own samples. Now it starts a line of its own."""
    h, server = controller, functions_server
    upload(bucket, "datasets/products/part-0.parquet", b"PAR1 shard 0")
    upload(bucket, "library/nightly.json", nightly_config(bucket))
    first = night(h, server, bucket)
    finish(h, server, first, challenger=0.42, baseline=0.05, champion=None)
    assert champion_of(h, first).run_id == first

    upload(bucket, "datasets/easy.parquet", b"PAR1 easy samples")
    hostile = {
        **nightly_config(bucket),
        "dataset": {"id": f"gs://{bucket}/datasets/easy.parquet", "eval_fraction": 0.25},
        "evaluation": {"samples": 4, "margin": 0.0},
    }
    body = {"config": hostile, "run_name": "takeover"}
    assert post(server["launch"], pubsub_event(body, message_id="777", when=h.clock())).status_code == 200
    taker = "takeover-" + next(
        n.removeprefix("runs/takeover-").removesuffix(".json") for n in h.ctx.store.blobs.list("runs/takeover-")
    )
    assert champion_env(h, taker) is None, "not evaluated against (nor warm-started from) another line's champion"
    finish(h, server, taker, challenger=0.99, baseline=0.05, champion=None)
    assert h.ctx.store.get(taker).promotion.promoted  # the champion of its own line
    assert champion_of(h, first).run_id == first  # the nightly's line is untouched
    assert champion_of(h, taker).run_id == taker


def test_the_previous_releases_pointer_is_adopted_only_by_its_own_line(controller, functions_server, bucket):
    """Pointers written before lines existed (champions/<name>.json) are taken over by the line whose
    evaluation the crowned run's record shows, and by no other."""
    h, server = controller, functions_server
    upload(bucket, "datasets/products/part-0.parquet", b"PAR1 shard 0")
    upload(bucket, "library/nightly.json", nightly_config(bucket))
    first = night(h, server, bucket)
    finish(h, server, first, challenger=0.42, baseline=0.05, champion=None)
    new_pointer = champion_of(h, first)
    cfg = RunConfig.model_validate(h.ctx.store.get(first).config)
    h.ctx.store.blobs.delete(champion.path(champion.line(cfg)))
    legacy = new_pointer.model_copy(update={"evaluation_key": None})
    h.ctx.champions.write(cfg.name, legacy, if_generation_match=0)  # as the previous release wrote it

    h.clock.advance(DAY)
    upload(bucket, "datasets/products/part-1.parquet", b"PAR1 shard 1")
    second = night(h, server, bucket)
    assert champion_env(h, second) == {"run_id": first, "adapter_path": legacy.adapter_path}
    finish(h, server, second, challenger=0.6, baseline=0.42, champion=first)
    assert h.ctx.store.get(second).promotion.promoted
    assert champion_of(h, second).previous_run_id == first


def test_two_nightly_lines_run_on_one_night_each_as_its_own_run(controller, functions_server, bucket):
    """Two nightly configs fired on the same night (issue 67): each is a run of its own, named after its line, and
    one's failure is never the other's."""
    h = controller
    for line in ("shop", "toys"):
        upload(bucket, f"datasets/{line}/part-0.parquet", b"PAR1")
        config = {**nightly_config(bucket), "name": f"nightly-{line}"}
        config["dataset"] = {**config["dataset"], "id": f"gs://{bucket}/datasets/{line}"}
        upload(bucket, f"library/{line}.json", config)
        body = {"config_uri": f"gs://{bucket}/library/{line}.json", "nightly": True}
        assert post(functions_server["launch"], pubsub_event(body, when=h.clock())).status_code == 200
    day = f"{h.clock():%Y%m%d}"
    shop, toys = h.ctx.store.get(f"shop-{day}"), h.ctx.store.get(f"toys-{day}")
    assert shop.state == toys.state == State.SUBMITTED, (shop.reason, toys.reason)
    h.kube.set_status("rayjobs", shop.run_id, {"jobStatus": "FAILED", "message": "ValueError: shop's own"})
    watch(functions_server)
    assert h.ctx.store.get(shop.run_id).state == State.FAILED
    assert h.ctx.store.get(toys.run_id).state == State.SUBMITTED and "shop's own" not in (toys.reason or "")
