"""The commands about a run config file: validate (with its estimate), render (what a launch applies) and schema
(the JSON Schema, or the field reference as Markdown)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from functions.cli import options
from functions.cli.checks import launch_refusals, placeholders, up_front
from functions.cli.settings import CliSettings
from functions.core import config as configs
from functions.core import config_file, manifests
from functions.core.estimate import Estimate, estimate


class FileError(Exception):
    """An error that names the file it is about."""


def load(path: str) -> configs.RunConfig:
    try:
        return config_file.parse_config(Path(path).read_bytes(), config_file.config_format(path))
    except configs.ConfigError as err:
        raise configs.ConfigError([f"{path}: {line}" for line in err.errors]) from None


def bucket_storage(bucket: str | None) -> str | None:
    """--bucket as `b`, `gs://b` or `gs://b/`: the default checkpoint location in it."""
    if not bucket:
        return None
    name = bucket.removeprefix("gs://").strip("/")
    if not re.fullmatch(configs.BUCKET, name):
        raise configs.ConfigError([f"--bucket: {bucket!r} is not a bucket name (b or gs://b)"])
    return f"gs://{name}/checkpoints"


def cmd_validate(args: argparse.Namespace) -> int:
    from functions.cli import settings as cli_settings
    from functions.core.advice import right_sizing

    named = getattr(args, "named", args.config)
    try:
        cfg = load(args.config)
    except configs.ConfigError as err:
        if not args.json:
            raise
        print(json.dumps({"config": named, "ok": False, "errors": err.errors}, indent=2))
        return 2
    errors, rows = up_front(args.config, cfg, named)  # a dataset of your own here: every row read and checked
    if errors:
        if args.json:
            print(json.dumps({"config": named, "ok": False, "errors": errors}, indent=2))
        for error in [] if args.json else errors:
            print(f"error: {error}", file=sys.stderr)
        return 2
    deployment = cli_settings.load({})
    warnings = [f"{left} (submit refuses it until it is edited)" for left in placeholders(args.config)]
    # Warnings, not errors: the deployed function may know more of its policy than this machine's settings.
    warnings += [
        f"{refusal} (raytune doctor {named} asks the deployed launch)"
        for refusal in launch_refusals(deployment, args.config, named)
    ]
    warnings += [f"{named}: {warning}" for warning in right_sizing(cfg)]
    scaling = cfg.scaling
    hardware = f"{scaling.gpus_per_node} {scaling.accelerator}" if scaling.use_gpu else "CPU"
    trials = f" a trial; a sweep of {cfg.sweep.trials} trials, {cfg.sweep.concurrent} at once" if cfg.sweep else ""
    said = f"{cfg.model.id} on {scaling.nodes} x {hardware} ({scaling.num_workers} Ray Train workers), {trained(cfg)}"
    expected, lines = priced(deployment, cfg, rows)
    if args.json:
        found = {"config": named, "ok": True, "summary": said + trials, "warnings": warnings}
        print(json.dumps(found | {"estimate": json.loads(expected.model_dump_json())}, indent=2))
        return 0
    print(f"ok: {named}: {said}{trials}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for line in lines:
        print(line)
    return 0


def trained(cfg: configs.RunConfig) -> str:
    """How long it trains, as the trainer decides: max_steps where set (whatever the epochs), else its epochs."""
    t = cfg.training
    if t.max_steps:
        return f"{t.max_steps} step{'s' if t.max_steps != 1 else ''}"
    return f"{t.epochs:g} epoch{'s' if t.epochs != 1 else ''}"


def priced(deployment: CliSettings, cfg: configs.RunConfig, rows: int | None = None) -> tuple[Estimate, list[str]]:
    """The estimate's lines for the run as the deployment will launch it (its policy's capacity, its prices, in
    its currency), or, with no deployment settings, as the config says, and saying so."""
    known = deployment.cloud
    launched = deployment.as_launched(cfg) if known else cfg
    expected = estimate(launched, deployment.prices(), rows)
    return expected, expected.lines(deployment.price_currency, deployment.source if known else None)


def cmd_render(args: argparse.Namespace) -> int:
    from trainer.codehash import code_files, code_sha256

    cfg = load(args.config).with_storage(bucket_storage(args.bucket))
    from functions.core.advice import local_only

    for warning in local_only(cfg):
        print(f"warning: {getattr(args, 'named', args.config)}: {warning}", file=sys.stderr)
    if args.run_id and not re.fullmatch(configs.DNS_LABEL, args.run_id):
        raise configs.ConfigError([f"--run-id: {args.run_id!r} is not a DNS label (a-z, 0-9, '-')"])
    files = code_files()
    objects = manifests.assemble(cfg, args.run_id or cfg.name, files, code_sha256(files))
    sys.stdout.write(
        f"# The Secret is not printed; create it once with:\n"
        f"#   kubectl create secret generic {manifests.HF_SECRET} -n {cfg.cluster.namespace}"
        f' --from-literal={manifests.HF_SECRET_KEY}="$HF_TOKEN"\n'
    )
    sys.stdout.write(manifests.to_yaml(objects.in_order()))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    if args.markdown:
        from functions.cli.reference import markdown

        text = markdown(config_file.json_schema())
    else:
        text = json.dumps(config_file.json_schema(), indent=2, sort_keys=True) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def add_parsers(sub: Any) -> None:
    validate = sub.add_parser("validate", help="check a run config and summarise it")
    options.add_config(validate)
    options.add_set(validate)
    options.add_json(validate, "the verdict, warnings and estimate as JSON (errors too, exit 2)")
    validate.set_defaults(func=cmd_validate)

    render = sub.add_parser(
        "render",
        help="print the ConfigMap, ComputeClass (with scaling.capacity), RayCluster and RayJob as YAML for kubectl",
    )
    options.add_config(render)
    render.add_argument("--bucket", help="checkpoint bucket when the config sets no storage_path")
    render.add_argument("--run-id", help="RayJob name (default: the config's name)")
    options.add_set(render)
    render.set_defaults(func=cmd_render)

    schema = sub.add_parser("schema", help="print or write the run config JSON Schema")
    schema.add_argument("--output", "-o", help="write it to this file (default: print it)")
    schema.add_argument("--markdown", action="store_true", help="the field reference as a Markdown table")
    schema.set_defaults(func=cmd_schema)
