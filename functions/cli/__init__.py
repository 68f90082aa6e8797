"""`raytune` command line: validate and render run configs, export the schema, run locally, package."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from functions.core import config as configs
from functions.core import manifests


def _load(path: str) -> configs.RunConfig:
    return configs.parse_config(Path(path).read_bytes())


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = _load(args.config)
    scaling = cfg.scaling
    hardware = f"{scaling.gpus_per_node} {scaling.accelerator}" if scaling.use_gpu else "CPU"
    print(
        f"ok: {args.config}: {cfg.model.id} on {scaling.nodes} x {hardware}"
        f" ({scaling.num_workers} Ray Train workers), {cfg.training.epochs:g} epochs"
    )
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from trainer.codehash import code_files, code_sha256

    cfg = _load(args.config).with_storage(args.bucket)
    if args.run_id and not re.fullmatch(configs.DNS_LABEL, args.run_id):
        raise configs.ConfigError([f"--run-id: {args.run_id!r} is not a DNS label (a-z, 0-9, '-')"])
    files = code_files()
    objects = manifests.run_objects(
        cfg, args.run_id or cfg.name, files, code_sha256(files), worker_replicas=cfg.scaling.nodes, env={}
    )
    sys.stdout.write(
        f"# The Secret is not printed; create it once with:\n"
        f"#   kubectl create secret generic {manifests.HF_SECRET} -n {cfg.cluster.namespace}"
        f' --from-literal={manifests.HF_SECRET_KEY}="$HF_TOKEN"\n'
    )
    sys.stdout.write(manifests.to_yaml(objects))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    if args.markdown:
        from functions.cli.reference import markdown

        text = markdown(configs.json_schema())
    else:
        text = json.dumps(configs.json_schema(), indent=2, sort_keys=True) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    from functions.local import driver as local

    _load(args.config)  # a bad config fails here, before any process starts
    return local.run(args.config, Path(args.workdir).resolve())


def cmd_package(args: argparse.Namespace) -> int:
    from functions.cli import package

    report = package.build(Path(args.output).resolve())
    print(
        f"{report['path']}: {report['files']} files, {report['bytes'] / 1024:.1f} KiB zipped "
        f"({report['source_bytes'] / 1024:.1f} KiB of source)"
    )
    print("requirements.txt: " + ", ".join(report["requirements"]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raytune", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check a run config and summarise it")
    validate.add_argument("config")
    validate.set_defaults(func=cmd_validate)

    render = sub.add_parser("render", help="print the ConfigMap, RayCluster and RayJob as YAML for kubectl apply -f -")
    render.add_argument("config")
    render.add_argument("--bucket", help="checkpoint bucket when the config sets no storage_path")
    render.add_argument("--run-id", help="RayJob name (default: the config's name)")
    render.set_defaults(func=cmd_render)

    run_local = sub.add_parser("local", help="run a fine-tune end to end on this machine (local Ray, fake-gcs-server)")
    run_local.add_argument("config", nargs="?", default="examples/quickstart.json")
    run_local.add_argument(
        "--workdir", default=".raytune/local", help="bucket data, checkpoints and Ray logs (kept between runs)"
    )
    run_local.set_defaults(func=cmd_local)

    pack = sub.add_parser("package", help="build the Cloud Functions source archive for Terraform")
    pack.add_argument("--output", "-o", default="build/raytune-functions.zip")
    pack.set_defaults(func=cmd_package)

    schema = sub.add_parser("schema", help="print or write the run config JSON Schema")
    schema.add_argument("--output", "-o")
    schema.add_argument("--markdown", action="store_true", help="the field reference as a Markdown table")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except configs.ConfigError as err:
        for line in err.errors:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
