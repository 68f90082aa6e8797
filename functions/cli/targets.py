"""Which runs an operator command works on: the deployment the settings name, or a `raytune local` workdir
(functions/cli/backends.py), and one run's record in it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from functions.cli import settings as cli_settings
from functions.cli.backends import Backend, CloudBackend, LocalBackend
from functions.core.runs import RunRecord


def backend_for(args: argparse.Namespace) -> Backend:
    """--local or --workdir DIR: a local workdir; otherwise the deployment the settings name, or (no cloud
    settings at all) the default local workdir, said on stderr so the switch is never silent."""
    if args.local or args.workdir:
        return local_backend(Path(args.workdir) if args.workdir else None)
    found = cli_settings.load({"project": args.project, "runs_bucket": args.bucket})
    if found.cloud:
        return CloudBackend(found)
    backend = local_backend(None)
    print(f"no deployment settings found ({found.source}): reading the local workdir {backend.where}", file=sys.stderr)
    return backend


def deployment_for(args: argparse.Namespace) -> CloudBackend:
    """The deployment the settings name; never the local default in its stead (`submit` would run it here)."""
    found = cli_settings.load({"project": args.project, "runs_bucket": args.bucket})
    if not found.cloud:
        raise RuntimeError(
            f"no deployment to submit to: no runs bucket in {found.source} (RAYTUNE_BUCKET, raytune.toml from "
            f"`terraform output -raw cli_config > raytune.toml`, or --bucket); to run it here: raytune local "
            f"{getattr(args, 'as_given', None) or args.config}"
        )
    return CloudBackend(found)


def local_backend(workdir: Path | None) -> LocalBackend:
    """A local workdir that exists; the default one, or the error lists those `raytune local` made here."""
    backend = LocalBackend(workdir)
    if not backend.workdir.is_dir():
        others = sorted(str(p) for p in Path(".raytune").glob("local*") if p.is_dir())
        hint = f"; workdirs here: {', '.join(others)} (pass one with --workdir)" if others else ""
        raise RuntimeError(f"no raytune local workdir at {backend.where}{hint}")
    return backend


def console() -> Any:
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=True)
    if not out.is_terminal:
        out = Console(highlight=False, soft_wrap=True, width=200)  # pipes and files: no squeezed columns
    return out


def get_record(backend: Backend, run_id: str) -> RunRecord:
    record = backend.store.get(run_id)
    if record is None:
        elsewhere = [w for w in local_workdirs() if w != Path(backend.where) and LocalBackend(w).store.get(run_id)]
        hint = f": it is in {elsewhere[0]} (add --workdir {elsewhere[0]})" if elsewhere else ""
        raise RuntimeError(f"no run {run_id} in {backend.where}{hint}")
    return record


def local_workdirs() -> list[Path]:
    """The raytune local workdirs under this folder (.raytune/local, .raytune/local-2, ...)."""
    return sorted(p.resolve() for p in Path(".raytune").glob("local*") if (p / "gcs").is_dir())
