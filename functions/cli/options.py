"""Options several commands share, declared once."""

from __future__ import annotations

import argparse

from functions.core import permissions


def add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a config field by its dotted name, typed by the schema (repeatable): --set training.epochs=1",
    )


def add_config(parser: argparse.ArgumentParser, optional: str | None = None) -> None:
    """The run config a command reads; `optional`: what stands in when none is given."""
    if optional:
        parser.add_argument("config", nargs="?", help=f"a run config, JSON or YAML (default: {optional})")
    else:
        parser.add_argument("config", help="a run config, JSON or YAML")


def add_switches(parser: argparse.ArgumentParser) -> None:
    """Terraform's variables that add grants (functions/core/permissions.py's SWITCHES)."""
    parser.add_argument("--create-clusters", action="store_true", help="as with functions_create_clusters=true")
    parser.add_argument("--image-cache", action="store_true", help="as with image_cache=true")
    parser.add_argument("--tracking-vertex", action="store_true", help="as with tracking_vertex=true")


def switches(args: argparse.Namespace) -> list[str]:
    """The switches add_switches' flags turn on, in permissions.py's words."""
    on = {
        permissions.CREATE_CLUSTERS: args.create_clusters,
        permissions.IMAGE_CACHE: args.image_cache,
        permissions.TRACK_VERTEX: args.tracking_vertex,
    }
    return [switch for switch in permissions.SWITCHES if on[switch]]


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=what)


def add_target(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Which runs a command operates on: the deployment's (its project and runs bucket) or a local workdir's."""
    parser.add_argument("--local", action="store_true", help="the runs of `raytune local` (its workdir .raytune/local)")
    parser.add_argument("--workdir", metavar="DIR", help="another raytune local workdir (implies --local)")
    parser.add_argument("--project", help="GCP project (RAYTUNE_PROJECT, raytune.toml)")
    parser.add_argument("--bucket", help="the runs bucket (RAYTUNE_BUCKET, raytune.toml)")
    return parser


def add_waiting(parser: argparse.ArgumentParser, default_s: float, what: str) -> None:
    """How long a command waits for the run's record to say what it asked for."""
    parser.add_argument("--timeout", type=float, default=default_s, help=what)
    parser.add_argument("--interval", type=float, default=3.0, help=argparse.SUPPRESS)


def amount(text: str) -> float:
    """A cost cap: a number above 0 (argparse names the option when it is not one)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not an amount above 0")
    return value
