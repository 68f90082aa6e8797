"""The commands that build and check a deployment: package (the functions' source archive for Terraform),
permissions (who calls what with which IAM permission), doctor (ask Google and the cluster whether it works) and
image (the trainer image, built by Cloud Build)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from functions.cli import narrow, options
from functions.cli.config_commands import FileError, load


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

    uses = permissions.all_uses(options.switches(args))
    if args.json:
        print(json.dumps([asdict(u) for u in uses], indent=2))
        return 0
    wide = permissions.table(uses)
    width = narrow.terminal_width()
    if width is None or max(map(len, wide.splitlines())) <= width:
        print(wide)  # one row a line: for grep, scripts and wide terminals
    else:
        print(narrow.grouped(((u.identity, u.resource, u.permission, u.why) for u in uses), width))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from functions.adapters.google_rest import NoCredentials
    from functions.cli import doctor
    from functions.cli import settings as cli_settings
    from functions.core import doctor as d

    found = cli_settings.load({"project": args.project, "runs_bucket": args.bucket})
    cfg = load(args.config) if args.config else None
    try:
        findings, skipped = doctor.cloud_doctor(found, cfg, options.switches(args)).run()
    except NoCredentials as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"findings": [asdict(f) for f in findings], "not_asked": skipped}, indent=2))
    else:
        print(d.report(findings, skipped))
    return d.exit_code(findings)


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
            "image_repository": args.image_repository,
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
        image_repository=given.image_repository,
    )
    ref, command = image.build(target, args.dry_run)
    print(("would run: " if args.dry_run else "built: ") + (command if args.dry_run else ref))
    lines = f"  cluster:\n    dependencies: image\n    worker_image: {ref}\n    head_image: {ref}"
    if args.cache:
        zone = args.cache_zone or f"{target.region}-b"
        cache = image.Cache(zone, args.cache_disk_gb, args.cache_vm_account, args.cache_network, args.cache_subnet)
        path, command = image.build_cache(target, cache, args.dry_run)
        print(("would run: " + command) if path is None else f"cache disk: {path}")
        lines += (
            f"\n    image_cache: {path or 'projects/' + target.project + '/global/images/raytune-trainer-<digest>'}"
        )
    print("use it in a run config:\n" + lines)
    return 0


def add_parsers(sub: Any) -> None:
    pack = sub.add_parser("package", help="build the Cloud Functions source archive for Terraform")
    pack.add_argument("--output", "-o", default="build/raytune-functions.zip", help="the archive to write")
    pack.set_defaults(func=cmd_package)

    perms = sub.add_parser(
        "permissions", help="who calls which Google API with which IAM permission (what Terraform grants)"
    )
    options.add_switches(perms)
    options.add_json(perms, "the table as JSON")
    perms.set_defaults(func=cmd_permissions)

    doc = sub.add_parser(
        "doctor",
        help="check a deployment on Google Cloud: APIs, what Terraform made, IAM asked of Google, the cluster "
        "(exit 0 only when all is ok, 1 on a problem, 2 when something could not be asked)",
    )
    doc.add_argument("--config", help="a run config to check too: its images and what it renders")
    doc.add_argument("--project", help="default: project in raytune.toml")
    doc.add_argument("--bucket", help="the runs bucket (default: runs_bucket in raytune.toml)")
    options.add_switches(doc)
    options.add_json(doc, "the findings as JSON")
    doc.set_defaults(func=cmd_doctor)
    _add_image_parser(sub)


def _add_image_parser(sub: Any) -> None:
    img = sub.add_parser("image", help="build the trainer image with Cloud Build into Artifact Registry")
    img.add_argument(
        "--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT"), help="GCP project (default: GOOGLE_CLOUD_PROJECT)"
    )
    img.add_argument("--region", help="default: region in raytune.toml, else us-central1")
    img.add_argument("--name", default="raytune", help="Terraform's var.name: the default for the next three")
    img.add_argument("--repository", help="the Artifact Registry repository (Terraform: var.name)")
    img.add_argument(
        "--image-repository",
        help="the repository's whole path, LOCATION-docker.pkg.dev/PROJECT/REPOSITORY (default: image_repository in "
        "raytune.toml; a multi-region one is pulled by every region)",
    )
    img.add_argument("--build-bucket", help="where gcloud stages the source (Terraform: <name>-build-<project>)")
    img.add_argument(
        "--service-account",
        help="the build's identity (Terraform: <name>-image-build@<project>.iam.gserviceaccount.com)",
    )
    img.add_argument(
        "--cache",
        action="store_true",
        help="then make the image's cache disk (gke-disk-image-builder): GPU nodes boot with it instead of pulling",
    )
    img.add_argument("--cache-zone", help="the zone of the builder's VM (default: <region>-b)")
    img.add_argument("--cache-disk-gb", type=int, default=100, help="the cache disk's size (the unpacked image)")
    img.add_argument(
        "--cache-vm-account",
        help="the builder VM's identity, which pulls the image (Terraform with image_cache=true: "
        "<name>-image-cache@<project>.iam.gserviceaccount.com)",
    )
    img.add_argument(
        "--cache-network", default="default", help="the builder VM's VPC network (Terraform's var.network)"
    )
    img.add_argument(
        "--cache-subnet", default="default", help="its subnetwork in the zone's region (a custom-mode network's)"
    )
    img.add_argument("--dry-run", action="store_true", help="print the gcloud command instead of running it")
    img.add_argument(
        "--write-requirements",
        action="store_true",
        help="rewrite image/requirements.txt from TRAINER_PIP and TRACKING_PIP",
    )
    img.add_argument(
        "--write-resolved",
        action="store_true",
        help="rewrite image/resolved.json: what pip resolves image/requirements.txt to on the image's platform",
    )
    img.set_defaults(func=cmd_image)
