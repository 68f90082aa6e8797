"""`raytune` command line: validate and render run configs (JSON or YAML), run them locally or submit them to a
deployment, follow and operate runs (runs, status, logs, cancel, retry, compare), generate with a trained adapter,
build and check a deployment (package, image, permissions, doctor), export the schema.

Commands that follow a run to its end (`local`, `submit --wait`, `logs -f`) exit with its outcome: 0 SUCCEEDED or
SKIPPED, 1 FAILED, 2 REJECTED (2 is also a usage error), 3 CANCELLED, 4 a local run nothing follows any more,
130 Ctrl-C while following (the run goes on)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from functions.cli.checks import missing_paths, placeholders
from functions.core import config as configs
from functions.core import config_file, manifests
from functions.core.errors import PermanentError


class FileError(Exception):
    """An error that names the file it is about."""


def _load(path: str) -> configs.RunConfig:
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
    from functions.core.advice import right_sizing

    cfg = _load(args.config)
    named = getattr(args, "named", args.config)
    if missing := missing_paths(args.config, cfg):
        for problem in missing:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    rows = None
    if cfg.dataset.id.startswith("/"):  # a dataset of your own on this machine: every row read and checked
        from trainer.data import DataError, check_rows

        try:
            rows = check_rows(cfg.dataset)
        except DataError as err:
            print(f"error: {named}: {err}", file=sys.stderr)
            return 2
    for left in placeholders(args.config):
        print(f"warning: {left} (submit refuses it until it is edited)", file=sys.stderr)
    scaling = cfg.scaling
    hardware = f"{scaling.gpus_per_node} {scaling.accelerator}" if scaling.use_gpu else "CPU"
    trials = f" a trial; a sweep of {cfg.sweep.trials} trials, {cfg.sweep.concurrent} at once" if cfg.sweep else ""
    print(
        f"ok: {named}: {cfg.model.id} on {scaling.nodes} x {hardware}"
        f" ({scaling.num_workers} Ray Train workers), {cfg.training.epochs:g} epochs{trials}"
    )
    for warning in right_sizing(cfg):
        print(f"warning: {named}: {warning}", file=sys.stderr)
    from functions.cli import settings as cli_settings
    from functions.core.estimate import estimate

    prices = cli_settings.load({}).prices()
    for line in estimate(cfg, prices, rows).lines():
        print(line)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from trainer.codehash import code_files, code_sha256

    cfg = _load(args.config).with_storage(bucket_storage(args.bucket))
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


def cmd_local(args: argparse.Namespace) -> int:
    from functions.local import driver as local

    if args.config:
        _load(args.config)  # a bad config fails here, naming the file, before any process starts
    night = args.night or (dt.datetime.now(dt.UTC).date() if args.nightly else None)
    workdir = Path(args.workdir) if args.workdir else None
    if args.detach:
        return local.detach(local_args(args), workdir)
    return local.run(args.config, workdir, as_json=args.json, night=night, timings=args.timings)


def local_args(args: argparse.Namespace) -> list[str]:
    """`raytune local`'s own arguments as given, for the detached process."""
    found = [args.config] if args.config else []
    if args.nightly:
        found.append("--nightly")
    if args.night:
        found += ["--night", args.night.isoformat()]
    if args.json:
        found.append("--json")
    if args.timings:
        found.append("--timings")
    return found


def cmd_generate(args: argparse.Namespace) -> int:
    from trainer import generate

    for path in (args.adapter, args.image):
        if not Path(path).exists():
            raise FileError(f"{path}: no such file or folder")
    print(generate.describe(args.adapter, args.image, args.product, args.category, max_new_tokens=args.max_new_tokens))
    return 0


def cmd_package(args: argparse.Namespace) -> int:
    from functions.cli import package

    report = package.build(Path(args.output).resolve())
    print(
        f"{report['path']}: {report['files']} files, {report['bytes'] / 1024:.1f} KiB zipped "
        f"({report['source_bytes'] / 1024:.1f} KiB of source)"
    )
    print("requirements.txt: " + ", ".join(report["requirements"]))
    return 0


def cmd_permissions(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from functions.core import permissions

    if args.json:
        print(json.dumps([asdict(u) for u in permissions.all_uses(args.create_clusters)], indent=2))
    else:
        print(permissions.table(args.create_clusters))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from functions.adapters.google_rest import NoCredentials
    from functions.cli import doctor
    from functions.cli import settings as cli_settings
    from functions.core import doctor as verdicts

    found = cli_settings.load({"project": args.project, "runs_bucket": args.bucket})
    cfg = _load(args.config) if args.config else None
    try:
        findings, skipped = doctor.cloud_doctor(found, cfg, args.create_clusters).run()
    except NoCredentials as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"findings": [asdict(f) for f in findings], "not_asked": skipped}, indent=2))
    else:
        print(verdicts.report(findings, skipped))
    return verdicts.exit_code(findings)


def cmd_image(args: argparse.Namespace) -> int:
    from functions.cli import image

    if args.write_requirements:
        print(f"wrote {image.write_requirements()}")
        return 0
    if args.write_resolved:
        print(f"wrote {image.write_resolved()}")
        return 0
    from functions.cli import settings

    given = settings.load(
        {
            "project": args.project,
            "region": args.region,
            "repository": args.repository,
            "build_bucket": args.build_bucket,
            "image_build_service_account": args.service_account,
        }
    )
    if not given.project:
        raise FileError("--project is required (or GOOGLE_CLOUD_PROJECT, RAYTUNE_PROJECT, project in raytune.toml)")
    target = image.Target(
        project=given.project,
        region=given.region or "us-central1",
        name=args.name,
        repository=given.repository,
        build_bucket=given.build_bucket,
        service_account=given.image_build_service_account,
    )
    ref, command = image.build(target, args.dry_run)
    print(("would run: " if args.dry_run else "built: ") + (command if args.dry_run else ref))
    print(
        f"use it in a run config:\n  cluster:\n    dependencies: image\n    worker_image: {ref}\n    head_image: {ref}"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    parser = argparse.ArgumentParser(prog="raytune", description=__doc__)
    try:
        parser.add_argument("--version", action="version", version=f"raytune {version('raytune')}")
    except PackageNotFoundError:  # run from a source tree that was never installed
        parser.add_argument("--version", action="version", version="raytune (not installed)")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check a run config and summarise it")
    validate.add_argument("config", help="a run config, JSON or YAML")
    validate.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a config field by its dotted name, typed by the schema (repeatable): --set training.epochs=1",
    )
    validate.set_defaults(func=cmd_validate)

    render = sub.add_parser(
        "render",
        help="print the ConfigMap, ComputeClass (with scaling.capacity), RayCluster and RayJob as YAML for kubectl",
    )
    render.add_argument("config", help="a run config, JSON or YAML")
    render.add_argument("--bucket", help="checkpoint bucket when the config sets no storage_path")
    render.add_argument("--run-id", help="RayJob name (default: the config's name)")
    render.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a config field by its dotted name, typed by the schema (repeatable): --set training.epochs=1",
    )
    render.set_defaults(func=cmd_render)

    run_local = sub.add_parser("local", help="run a fine-tune end to end on this machine (local Ray, fake-gcs-server)")
    run_local.add_argument("config", nargs="?", help="a run config, JSON or YAML (default: the packaged quickstart)")
    run_local.add_argument(
        "--workdir",
        help="bucket data, checkpoints, logs and records, kept between runs "
        "(default .raytune/local, or the next free .raytune/local-N while a run holds it)",
    )
    run_local.add_argument(
        "--json", action="store_true", help="print the final run record as JSON (progress to stderr)"
    )
    run_local.add_argument(
        "--timings",
        action="store_true",
        help="at the end, print where the run's time went: the local cluster's start and stop, each state, "
        "and the job's phases (the same timings are in the record)",
    )
    run_local.add_argument(
        "--detach",
        action="store_true",
        help="run in the background (the terminal may close): prints the run id and its workdir, then "
        "`raytune runs/status/logs -f/cancel --workdir DIR` from any terminal",
    )
    run_local.add_argument(
        "--nightly",
        action="store_true",
        help="launch as the nightly scheduler does: trains only on new inputs, evaluates against the champion",
    )
    run_local.add_argument(
        "--night",
        type=dt.date.fromisoformat,
        help="with --nightly: the night (YYYY-MM-DD) it stands for (default today, UTC); one run per night",
    )
    run_local.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a config field by its dotted name, typed by the schema (repeatable): --set training.epochs=1",
    )
    run_local.set_defaults(func=cmd_local)

    gen = sub.add_parser("generate", help="describe a product with a trained adapter (as `raytune local` writes it)")
    gen.add_argument("--adapter", required=True, help="the run's adapter folder (adapter_path in its result)")
    gen.add_argument("--image", required=True, help="the product photo")
    gen.add_argument("--product", required=True, help="the product's name, as in the dataset's rows")
    gen.add_argument("--category", required=True, help="its category, as in the dataset's rows")
    gen.add_argument("--max-new-tokens", type=int, default=128, help="the longest description, in tokens")
    gen.set_defaults(func=cmd_generate)

    pack = sub.add_parser("package", help="build the Cloud Functions source archive for Terraform")
    pack.add_argument("--output", "-o", default="build/raytune-functions.zip", help="the archive to write")
    pack.set_defaults(func=cmd_package)

    perms = sub.add_parser(
        "permissions", help="who calls which Google API with which IAM permission (what Terraform grants)"
    )
    perms.add_argument("--create-clusters", action="store_true", help="as with functions_create_clusters=true")
    perms.add_argument("--json", action="store_true", help="the table as JSON")
    perms.set_defaults(func=cmd_permissions)

    doc = sub.add_parser(
        "doctor",
        help="check a deployment on Google Cloud: APIs, what Terraform made, IAM asked of Google, the cluster "
        "(exit 0 only when all is ok, 1 on a problem, 2 when something could not be asked)",
    )
    doc.add_argument("--config", help="a run config to check too: its images and what it renders")
    doc.add_argument("--project", help="default: project in raytune.toml")
    doc.add_argument("--bucket", help="the runs bucket (default: runs_bucket in raytune.toml)")
    doc.add_argument("--create-clusters", action="store_true", help="as with functions_create_clusters=true")
    doc.add_argument("--json", action="store_true", help="the findings as JSON")
    doc.set_defaults(func=cmd_doctor)

    img = sub.add_parser("image", help="build the trainer image with Cloud Build into Artifact Registry")
    img.add_argument(
        "--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT"), help="GCP project (default: GOOGLE_CLOUD_PROJECT)"
    )
    img.add_argument("--region", help="default: region in raytune.toml, else us-central1")
    img.add_argument("--name", default="raytune", help="Terraform's var.name: the default for the next three")
    img.add_argument("--repository", help="the Artifact Registry repository (Terraform: var.name)")
    img.add_argument("--build-bucket", help="where gcloud stages the source (Terraform: <name>-build-<project>)")
    img.add_argument(
        "--service-account",
        help="the build's identity (Terraform: <name>-image-build@<project>.iam.gserviceaccount.com)",
    )
    img.add_argument("--dry-run", action="store_true", help="print the gcloud command instead of running it")
    img.add_argument(
        "--write-requirements", action="store_true", help="rewrite image/requirements.txt from TRAINER_PIP"
    )
    img.add_argument(
        "--write-resolved",
        action="store_true",
        help="rewrite image/resolved.json: what pip resolves image/requirements.txt to on the image's platform",
    )
    img.set_defaults(func=cmd_image)

    from functions.cli import ops

    ops.add_parsers(sub)

    schema = sub.add_parser("schema", help="print or write the run config JSON Schema")
    schema.add_argument("--output", "-o", help="write it to this file (default: print it)")
    schema.add_argument("--markdown", action="store_true", help="the field reference as a Markdown table")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "set", None):
            from functions.cli.overrides import overridden

            given = args.config or str(Path(__file__).parents[1] / "local" / "quickstart.json")
            args.config = overridden(given, args.set)
            args.named = f"{given} (--set {' '.join(args.set)})"
        return args.func(args)
    except configs.ConfigError as err:
        for line in err.errors:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except FileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # names the file: "[Errno 2] No such file or directory: 'x.json'"
        print(f"error: {err.filename + ': ' if err.filename else ''}{err.strerror or err}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as err:
        print(f"error: {shlex.join(err.cmd)} exited with {err.returncode}", file=sys.stderr)
        return 1
    except (PermanentError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        if not _missing_credentials(err):
            raise
        print(
            "error: no Google credentials found (Application Default Credentials): run "
            "`gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS",
            file=sys.stderr,
        )
        return 2


def _missing_credentials(err: BaseException) -> bool:
    """google-auth's DefaultCredentialsError, raised or wrapped (only loaded if a Google client was)."""
    exceptions = sys.modules.get("google.auth.exceptions")
    if exceptions is None:
        return False
    while err is not None:
        if isinstance(err, exceptions.DefaultCredentialsError):
            return True
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return False


if __name__ == "__main__":
    sys.exit(main())
