"""`raytune` command line: validate and render run configs (JSON or YAML), run them locally or submit them to a
deployment, follow and operate runs (runs, status, logs, cancel, retry, compare), generate with a trained adapter,
build and check a deployment (package, image, permissions, doctor), export the schema.

Commands that follow a run to its end (`local`, `submit --wait`, `logs -f`) exit with its outcome: 0 SUCCEEDED or
SKIPPED, 1 FAILED, 2 REJECTED (2 is also a usage error), 3 CANCELLED, 4 a local run nothing follows any more,
130 Ctrl-C while following (the run goes on)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from functions.cli import champions, config_commands, deploy_commands, local_commands, ops, run_control
from functions.cli.config_commands import FileError
from functions.core import config as configs
from functions.core import release
from functions.core.errors import PermanentError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raytune", description=__doc__)
    parser.add_argument("--version", action="version", version=f"raytune {release.VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)
    for commands in (config_commands, local_commands, deploy_commands, run_control, ops, champions):
        commands.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "set", None):
            from functions.cli.overrides import overridden

            given = args.config or str(Path(__file__).parents[1] / "local" / "quickstart.json")
            args.config = overridden(given, args.set)
            args.named = f"{given} (--set {' '.join(args.set)})"
            # what a person would type again: the file itself and its overrides, never the temporary copy
            args.as_given = shlex.join([given, *(part for item in args.set for part in ("--set", item))])
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
