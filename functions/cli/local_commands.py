"""The commands that run here: `raytune local` (a fine-tune end to end on the embedded local default, in the
foreground or detached) and `raytune generate` (a description from a trained adapter)."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from pathlib import Path
from typing import Any

from functions.cli import options
from functions.cli.config_commands import FileError, load
from functions.local.session import FIRST_KEEP_WARM_S, ITERATING_S, KEEP_WARM_ENV, KEEP_WARM_S


def seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds (0 or more)")
    return value


def cmd_local(args: argparse.Namespace) -> int:
    from functions.local import command as local

    workdir = Path(args.workdir) if args.workdir else None
    if args.stop:
        return local.stop_warm(workdir)
    if args.config and (errors := checked(args.config)):
        for error in errors:  # validate's own lines: nothing is started, no record is written
            print(f"error: {error}", file=sys.stderr)
        return 2
    if not args.json:
        print_estimate(args.config)
    night = args.night or (dt.datetime.now(dt.UTC).date() if args.nightly else None)
    if args.detach:
        return local.detach(local_args(args), workdir)
    return local.run(
        args.config, workdir, as_json=args.json, night=night, timings=args.timings, keep_warm_s=args.keep_warm
    )


def checked(path: str) -> list[str]:
    """validate's checks in this process, before any cluster starts: the config (a bad one raises, naming the
    file), its local paths, and every row of a dataset on this machine."""
    from functions.cli.checks import up_front

    return up_front(path, load(path))[0]


def print_estimate(path: str | None) -> None:
    """What the run will take, as validate says it (its time; no money on this machine), before it starts."""
    from functions.cli.config_commands import priced
    from functions.cli.settings import CliSettings
    from functions.local.command import QUICKSTART

    _, lines = priced(CliSettings(), load(path or str(QUICKSTART)))
    for line in lines:
        if not line.lstrip().startswith(("cost", "nodes")):  # GPU node-hours and money: the cloud's, not this machine's
            print(
                line.replace(" from on-demand", " on this machine") if line.startswith("estimate:") else line,
                flush=True,
            )


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
    return [*found, *(["--keep-warm", str(args.keep_warm)] if args.keep_warm is not None else [])]


def cmd_generate(args: argparse.Namespace) -> int:
    from trainer import generate

    for path in (args.adapter, args.image):
        if not Path(path).exists():
            raise FileError(f"{path}: no such file or folder")
    print(generate.describe(args.adapter, args.image, args.product, args.category, max_new_tokens=args.max_new_tokens))
    if generate.is_toy(Path(args.adapter)):
        print(
            "(a toy's words: the tiny Gemma 3 is built from its config with random weights, so what it says shows the "
            "pipeline works, not what a fine-tune of google/gemma-3-4b-it says)",
            file=sys.stderr,
        )
    return 0


def add_parsers(sub: Any) -> None:
    run_local = sub.add_parser("local", help="run a fine-tune end to end on this machine (local Ray, fake-gcs-server)")
    options.add_config(run_local, optional="the packaged quickstart")
    run_local.add_argument(
        "--workdir",
        help="bucket data, checkpoints, logs and records, kept between runs "
        "(default .raytune/local, or the next free .raytune/local-N while a run holds it)",
    )
    options.add_json(run_local, "print the final run record as JSON (progress to stderr)")
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
        "--keep-warm",
        type=seconds,
        default=None,  # driver.run resolves it (the environment, else the iteration rule), as for retry
        metavar="SECONDS",
        help=f"after a run that ended on its own, keep the local Ray head up this long for the workdir's next run "
        f"(default: {KEEP_WARM_S:.0f} when runs follow each other within {ITERATING_S:.0f}s, else "
        f"{FIRST_KEEP_WARM_S:.0f}; or {KEEP_WARM_ENV}; 0: stop everything at the end)",
    )
    run_local.add_argument(
        "--stop", action="store_true", help="stop the workdir's warm local cluster now (never one a run is using)"
    )
    options.add_set(run_local)
    run_local.set_defaults(func=cmd_local)

    gen = sub.add_parser("generate", help="describe a product with a trained adapter (as `raytune local` writes it)")
    gen.add_argument("--adapter", required=True, help="the run's adapter folder (adapter_path in its result)")
    gen.add_argument("--image", required=True, help="the product photo")
    gen.add_argument("--product", required=True, help="the product's name, as in the dataset's rows")
    gen.add_argument("--category", required=True, help="its category, as in the dataset's rows")
    gen.add_argument("--max-new-tokens", type=int, default=128, help="the longest description, in tokens")
    gen.set_defaults(func=cmd_generate)
