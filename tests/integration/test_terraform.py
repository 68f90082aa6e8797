"""Terraform, checked offline: formatting, structure against the code (entry points, environment,
IAM for the triggers), the Ray operator cluster, and a checkov scan with every finding fixed or justified."""

from __future__ import annotations

import ast
import base64
import datetime as dt
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
from hcl2 import SerializationOptions

ROOT = Path(__file__).resolve().parents[2]
TF = ROOT / "terraform"


@pytest.fixture(scope="module")
def tf() -> dict:
    """All resources by type and name, all locals, all variables."""
    merged = {"resource": {}, "locals": {}, "variable": {}}
    options = SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    for path in sorted(TF.glob("*.tf")):
        with path.open() as f:
            doc = hcl2.load(f, serialization_options=options)
        for block in doc.get("resource", []):
            for kind, named in block.items():
                merged["resource"].setdefault(kind, {}).update(named)
        for block in doc.get("locals", []):
            merged["locals"].update(block)
        for block in doc.get("variable", []):
            merged["variable"].update(block)
    return merged


def resources(tf, kind: str) -> dict:
    return tf["resource"].get(kind, {})


def test_terraform_fmt():
    env = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null"}
    out = subprocess.run(
        ["terraform", "fmt", "-check", "-recursive", "-diff", str(TF)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr


def cloud_event_targets() -> set[str]:
    tree = ast.parse((ROOT / "main.py").read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) == "functions_framework.cloud_event" for d in node.decorator_list)
    }


def env_vars_read() -> set[str]:
    source = (ROOT / "functions" / "handlers" / "settings.py").read_text()
    return set(re.findall(r'env(?:\.get\(|\[)"([A-Z_]+)"', source))


def test_every_function_has_an_entry_point_and_its_environment(tf):
    function = resources(tf, "google_cloudfunctions2_function")["fn"]
    assert function["for_each"] == "${local.functions}"
    specs = tf["locals"]["functions"]
    assert set(specs) == {"launch_upload", "launch_message", "watch"}
    assert {spec["entry_point"] for spec in specs.values()} <= cloud_event_targets() == {"launch", "watch"}
    build = function["build_config"][0]
    assert build["runtime"] == "python311" and build["entry_point"] == "${each.value.entry_point}"
    service = function["service_config"][0]
    assert service["environment_variables"] == "${local.function_env}"
    env = set(tf["locals"]["function_env"])
    secrets = {s["key"] for s in service["secret_environment_variables"]}
    needed = env_vars_read()
    assert {"RAYTUNE_PROJECT", "RAYTUNE_BUCKET", "RAYTUNE_WATCH_TOPIC", "HF_TOKEN"} <= needed
    assert needed <= env | secrets, needed - env - secrets
    assert secrets == {"HF_TOKEN"} and "HF_TOKEN" not in env  # from Secret Manager, never plain
    assert service["timeout_seconds"] <= 540  # the event-driven maximum
    assert service["service_account_email"] == "${google_service_account.functions.email}"


def test_storage_trigger_retries_and_matches_the_bucket_region(tf):
    function = resources(tf, "google_cloudfunctions2_function")["fn"]
    [dynamic] = function["dynamic"]
    trigger = dynamic["event_trigger"]
    # Only the upload function gets a trigger: the configs bucket's.
    assert trigger["for_each"] == "${each.value.trigger_bucket == null ? [] : [each.value.trigger_bucket]}"
    specs = tf["locals"]["functions"]
    assert specs["launch_upload"]["trigger_bucket"] == "${google_storage_bucket.configs.name}"
    assert specs["launch_message"]["trigger_bucket"] is None and specs["watch"]["trigger_bucket"] is None
    content = trigger["content"][0]
    assert content["event_type"] == "google.cloud.storage.object.v1.finalized"
    assert content["retry_policy"] == "RETRY_POLICY_RETRY"
    assert content["event_filters"][0] == {"attribute": "bucket", "value": "${event_trigger.value}"}
    configs = resources(tf, "google_storage_bucket")["configs"]
    assert content["trigger_region"] == configs["location"] == "${var.region}"
    assert content["service_account_email"] == "${google_service_account.trigger.email}"


def test_pubsub_deliveries_retry_with_a_dead_letter_topic(tf):
    push = resources(tf, "google_pubsub_subscription")["push"]
    assert push["dead_letter_policy"][0]["dead_letter_topic"] == "${google_pubsub_topic.dead_letter.id}"
    assert push["retry_policy"][0]["minimum_backoff"] == "10s"
    assert push["push_config"][0]["oidc_token"][0]["service_account_email"] == "${google_service_account.trigger.email}"
    assert set(resources(tf, "google_pubsub_topic")) == {"launch", "watch", "run_events", "dead_letter"}
    jobs = resources(tf, "google_cloud_scheduler_job")
    assert jobs["watch_tick"]["pubsub_target"][0]["topic_name"] == "${google_pubsub_topic.watch.id}"
    assert jobs["nightly"]["pubsub_target"][0]["topic_name"] == "${google_pubsub_topic.launch.id}"
    nightly = jobs["nightly"]["pubsub_target"][0]["data"]  # a launch message events.py understands
    assert "config_uri = each.value.config_uri" in nightly and "nightly = true" in nightly


def test_buckets_are_private_and_versioned(tf):
    for bucket in resources(tf, "google_storage_bucket").values():
        assert bucket["uniform_bucket_level_access"] is True
        assert bucket["public_access_prevention"] == "enforced"
        assert bucket["versioning"][0]["enabled"] is True


def test_autopilot_cluster_with_the_ray_operator(tf):
    cluster = resources(tf, "google_container_cluster")["ray"]
    assert cluster["enable_autopilot"] is True
    ray = cluster["addons_config"][0]["ray_operator_config"][0]
    assert ray["enabled"] is True
    assert ray["ray_cluster_logging_config"][0]["enabled"] is True
    assert ray["ray_cluster_monitoring_config"][0]["enabled"] is True
    # one in every region runs may go, var.region's first (tests/contract/test_iam_grants.py evaluates 2 and 3)
    assert cluster["location"] == "${local.regions[count.index]}"
    assert cluster["count"] == "${var.create_gke_cluster ? length(local.regions) : 0}"


def checkov() -> str | None:
    local = ROOT / ".venv-checkov" / "bin" / "checkov"
    return str(local) if local.exists() else shutil.which("checkov")


def test_checkov_scan_is_clean():
    binary = checkov()
    if binary is None:
        pytest.fail("checkov is not installed: run ./dev setup")
    out = subprocess.run(
        [binary, "-d", str(TF), "--framework", "terraform", "--compact", "--quiet", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "Failed checks: 0" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]
    # Every skipped check says why.
    for path in TF.glob("*.tf"):
        for line in path.read_text().splitlines():
            if "checkov:skip=" in line:
                assert re.search(r"checkov:skip=CKV_\w+:\S.{10,}", line), f"{path.name}: {line.strip()}"


def test_private_nodes_have_egress_through_cloud_nat(tf):
    cluster = resources(tf, "google_container_cluster")["ray"]
    assert cluster["private_cluster_config"][0]["enable_private_nodes"] is True
    assert cluster["network"] == "${var.network}" and "ip_allocation_policy" in cluster
    router = resources(tf, "google_compute_router")["nat"]
    nat = resources(tf, "google_compute_router_nat")["nat"]
    # One per region runs may use (tests/contract/test_iam_grants.py evaluates it for several).
    assert router["network"] == "${var.network}" and router["region"] == "${each.value}"
    assert nat["for_each"] == "${google_compute_router.nat}" and nat["region"] == "${each.value.region}"
    assert nat["source_subnetwork_ip_ranges_to_nat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert "${google_compute_router_nat.nat}" in cluster["depends_on"]
    assert tf["variable"]["create_nat"]["default"] is True


def test_every_api_the_code_paths_need_is_enabled(tf):
    apis = set(tf["locals"]["apis"])
    assert {
        "artifactregistry.googleapis.com",
        "cloudbuild.googleapis.com",
        "cloudresourcemanager.googleapis.com",
        "compute.googleapis.com",
        "container.googleapis.com",
        "eventarc.googleapis.com",
        "iam.googleapis.com",
        "pubsub.googleapis.com",
        "run.googleapis.com",
        "secretmanager.googleapis.com",
    } <= apis


def test_trainer_image_repository_and_the_nightly_key(tf):
    repo = resources(tf, "google_artifact_registry_repository")["trainer"]
    assert repo["format"] == "DOCKER" and repo["repository_id"] == "${var.name}"  # raytune image --repository
    nightly = resources(tf, "google_cloud_scheduler_job")["nightly"]["pubsub_target"][0]
    assert nightly["attributes"] == {"raytune-nightly-key": "${random_password.nightly_key.result}"}
    env = tf["locals"]["function_env"]
    assert env["RAYTUNE_NIGHTLY_KEY"] == "${random_password.nightly_key.result}"


def test_staged_models_expire_where_the_trainer_stages_them(tf):
    """The runs bucket deletes staged model snapshots (not checkpoints) under the prefix the trainer stages them
    at for the functions' default storage path."""
    from trainer.staging import stage_uri

    checkpoints = tf["locals"]["function_env"]["RAYTUNE_CHECKPOINTS"]
    assert checkpoints == "gs://${google_storage_bucket.runs.name}/checkpoints"
    staged_object = stage_uri(checkpoints, "google/gemma-3-4b-it", "c0ffee").split("/", 3)[3] + "/config.json"
    (rule,) = [d["lifecycle_rule"] for d in resources(tf, "google_storage_bucket")["runs"]["dynamic"]]
    assert rule["for_each"] == "${var.staged_model_days > 0 ? [var.staged_model_days] : []}"
    (condition,) = rule["content"][0]["condition"]
    (prefix,) = condition["matches_prefix"]
    assert staged_object.startswith(prefix)
    assert not "checkpoints/run-1/checkpoint-10/model.safetensors".startswith(prefix), "checkpoints are kept"
    assert condition["age"] == "${lifecycle_rule.value}" and rule["content"][0]["action"] == [{"type": "Delete"}]
    assert tf["variable"]["staged_model_days"]["default"] == 30


def test_each_nightly_line_is_a_scheduler_job_whose_message_names_a_run_of_its_own():
    """Terraform's nightly_lines (and the earlier single nightly_config_uri, the line "nightly"): one scheduler job
    each, its own cron and time zone where given, and a message that events.py reads as that line's run of the
    night (issue 67)."""
    from cloudevents.http import from_http

    from functions.core import events
    from tests.contract.tfeval import Module
    from tests.fakes.http_events import pubsub_event

    lines = {
        "shop": {"config_uri": "gs://b/library/shop.yaml", "schedule": "0 3 * * *", "time_zone": None},
        "toys": {"config_uri": "gs://b/library/toys.yaml", "schedule": None, "time_zone": "Europe/Paris"},
    }
    module = Module(ROOT / "terraform", {"nightly_config_uri": "gs://b/library/n.json", "nightly_lines": lines})
    jobs = {i.address: i for i in module.instances("google_cloud_scheduler_job") if i.name == "nightly"}
    assert sorted(jobs) == [f'google_cloud_scheduler_job.nightly["{line}"]' for line in ("nightly", "shop", "toys")]
    runs = {}
    for address, job in jobs.items():
        [target] = job.blocks("pubsub_target")
        body = json.loads(base64.b64decode(module.eval(target.body["data"], dict(job.scope))))
        headers, data = pubsub_event(body, when=dt.datetime(2026, 12, 2, 2, tzinfo=dt.UTC))
        runs[address] = (
            events.launch_request(from_http(headers, data)).run_id,
            job.get("schedule"),
            job.get("time_zone"),
        )
    assert set(runs.values()) == {
        ("nightly-20261202", "0 2 * * *", "Etc/UTC"),
        ("shop-20261202", "0 3 * * *", "Etc/UTC"),
        ("toys-20261202", "0 2 * * *", "Europe/Paris"),
    }
    assert jobs['google_cloud_scheduler_job.nightly["nightly"]'].get("name") == "raytune-nightly"  # as before
