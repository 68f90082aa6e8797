"""The tracking section and its rules, pure: validation, the operator's policy, the records older releases read,
the runtime env, the story's lines, the credentials' redaction."""

from __future__ import annotations

import json
import re

import hcl2
import pytest

from functions.core import manifests, release, tracking
from functions.core.config import RunConfig
from functions.core.config_file import parse_config
from functions.core.policy import Policy
from functions.core.result import TrackedRun
from functions.core.runs import RunRecord
from functions.core.secrets import redact, redact_log
from functions.core.story import tracking_lines
from tests.builders import make_run
from tests.harness import ROOT

pytestmark = pytest.mark.unit
MLFLOW = "https://mlflow.example.com"


def config(**tracking_section) -> RunConfig:
    return RunConfig.model_validate({"name": "tracked", "tracking": tracking_section})


@pytest.mark.parametrize(
    "uri",
    ["file:///tmp/mlruns", "sqlite:///x.db", "http://user:pw@host", "https://host/ path", "javascript:alert(1)"],
)
def test_a_tracking_uri_is_a_server_never_a_path_a_store_or_credentials(uri):
    with pytest.raises(ValueError, match="is not an MLflow tracking server"):
        parse_config({"tracking": {"mlflow": {"uri": uri}}})


def test_destinations_are_the_sections_given_in_the_tables_order():
    assert config(wandb={}, mlflow={"uri": MLFLOW}).tracking.destinations == ("mlflow", "wandb")
    assert "tracking" not in RunConfig().model_dump(mode="json"), "off by default, and left out of a dump"
    with pytest.raises(ValueError, match="tensorboard"):
        parse_config({"tracking": {"tensorboard": {}}})


def test_the_operator_forbids_destinations_and_servers_and_a_cloud_run_needs_a_server():
    policy = Policy(tracking_destinations=("mlflow",), tracking_uris=("https://mlflow.example.com*",))
    assert policy.violations(config(mlflow={"uri": MLFLOW}), ("b",)) == []
    found = policy.violations(config(mlflow={"uri": "https://evil.example.net"}, wandb={}), ("b",))
    assert any("tracking_destinations: tracking.wandb is not allowed" in f for f in found), found
    assert any("tracking_uris: tracking.mlflow.uri 'https://evil.example.net'" in f for f in found), found
    assert any("names no uri" in f for f in Policy().violations(config(mlflow={}), ("b",)))
    assert not any("tracking" in f for f in Policy.unrestricted().violations(config(mlflow={}), ("b",))), "local"


def test_the_operators_default_section_and_server_are_filled_in():
    policy = Policy(tracking=tracking.TrackingSpec.model_validate({"mlflow": {"uri": MLFLOW}}))
    assert policy.fixed(RunConfig(name="plain")).tracking.mlflow.uri == MLFLOW
    assert policy.fixed(config(mlflow={})).tracking.mlflow.uri == MLFLOW
    own = "https://own.example.com"
    assert policy.fixed(config(mlflow={"uri": own})).tracking.mlflow.uri == own, "a config's own server stays"
    assert policy.fixed(config(wandb={})).tracking.mlflow is None, "a config's own section stays as it is"


def test_the_config_as_flat_parameters():
    flat = tracking.flat_params({"training": {"learning_rate": 2e-4, "seed": 1}, "lora": {"target_modules": ["q"]}})
    assert flat == {"training.learning_rate": "0.0002", "training.seed": "1", "lora.target_modules": '["q"]'}


def test_a_tracked_record_keeps_its_section_where_no_older_release_reads_it():
    cfg = config(mlflow={"uri": MLFLOW}).model_dump(mode="json")
    written = json.loads(make_run("tracked-0123456789").config(cfg).obj().model_dump_json())
    assert "tracking" not in written["config"], "0.1.0 and 0.2.0 read config"
    assert "tracking" not in written["accepted_config"], f"{release.ACCEPTED_READER} reads accepted_config"
    # 0.4.0 reads config_extensions and merges every field of it back: none it does not know (vertex: 0.5.0).
    assert written["config_extensions"] == {"tracking": {k: v for k, v in cfg["tracking"].items() if k != "vertex"}}
    assert "config_extensions_by_release" not in written
    assert RunRecord.model_validate(written).run_config().tracking.mlflow.uri == MLFLOW, "this release reads it"
    assert all("[]" not in field for field in release.newer_than(release.ACCEPTED_READER)), (
        "an extension is set back by its dotted path: never a list element's field"
    )


def test_a_tracked_runs_runtime_env_adds_its_destinations_clients_and_no_other_run_gets_them():
    def packages(cfg: RunConfig) -> list[str]:
        return manifests.runtime_env(cfg, "h" * 64, {})["pip"]["packages"]

    plain = packages(RunConfig())
    assert not any(p.startswith(("mlflow", "wandb")) for p in plain)
    assert packages(config(mlflow={"uri": MLFLOW})) == [*plain, *tracking.DESTINATIONS["mlflow"].pip]
    assert packages(config(wandb={})) == [*plain, *tracking.DESTINATIONS["wandb"].pip]


def test_the_story_says_where_the_run_is_tracked_and_once_what_was_lost():
    lines = tracking_lines(
        {
            "mlflow": TrackedRun(
                run_id="r1", url=f"{MLFLOW}/#/experiments/1/runs/r1", points=340, undelivered=12, error="503"
            ),
            "wandb": TrackedRun(points=10, undelivered=10, error="no API key"),
        }
    )
    assert lines == [
        f"  mlflow           {MLFLOW}/#/experiments/1/runs/r1",
        "  mlflow: 12 of 340 metric points were not delivered: 503",
        "  wandb            not tracked: no API key",
    ]
    store = "sqlite:////work/.raytune/local/mlflow.db"
    [line] = tracking_lines({"mlflow": TrackedRun(run_id="r2", uri=store, points=3)})
    assert line.endswith(f"mlflow ui --backend-store-uri {store}")


@pytest.mark.parametrize(
    "text",
    [
        "WANDB_API_KEY=0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
        "env MLFLOW_TRACKING_TOKEN: 'tok-123'",
        '{"MLFLOW_TRACKING_PASSWORD": "hunter2"}',
        "wandb_api_key = abc.def-ghi",
    ],
)
def test_a_tracking_credential_quoted_by_its_name_is_redacted_unregistered(text):
    value = re.split(r"[:=]\s*['\"]?", text, maxsplit=1)[1].strip("'\"}")
    assert value not in redact(text) and "[REDACTED]" in redact(text)
    assert value not in redact_log(f"line\n{text}\nmore\n", chunk=8)


def test_the_deployments_credentials_are_the_ones_the_pods_read():
    variables = hcl2.loads((ROOT / "terraform" / "policy.tf").read_text())["variable"]
    [spec] = [v['"tracking_credentials"'] for v in variables if '"tracking_credentials"' in v]
    allowed = re.findall(r'"([A-Z_]+)"', spec["validation"][0]["condition"])
    assert sorted(allowed) == sorted(tracking.CREDENTIALS)
    held = manifests.secret(RunConfig(), None, {"WANDB_API_KEY": "k"})
    assert held["stringData"] == {"WANDB_API_KEY": "k"}, "the Secret holds the tracking credentials by name"


def test_a_field_newer_than_the_extensions_reader_goes_under_the_release_that_reads_it(monkeypatch):
    vertex = {"project": "proj-a", "location": "europe-west4"}
    cfg = config(mlflow={"uri": MLFLOW}, vertex=vertex).model_dump(mode="json")
    written = json.loads(make_run("tracked-0123456789").config(cfg).obj().model_dump_json())
    assert "vertex" not in written["config_extensions"]["tracking"], "0.4.0 would refuse the record"
    assert written["config_extensions_by_release"] == {"0.5.0": {"tracking.vertex": cfg["tracking"]["vertex"]}}
    read = RunRecord.model_validate(written).run_config().tracking
    assert read.vertex.project == "proj-a" and read.mlflow.uri == MLFLOW
    # A release before 0.5.0 that knows config_extensions_by_release (none does yet; the rule for those to come)
    # merges back only its own and earlier entries: read as 0.4.x, the run goes on without Vertex AI.
    monkeypatch.setattr(release, "VERSION", "0.4.9")
    older = RunRecord.model_validate(written).run_config().tracking
    assert older.vertex is None and older.mlflow.uri == MLFLOW
