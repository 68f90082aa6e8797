"""`raytune champion RUN --rollback`: a person's rollback of a line's champion. The pointer in the runs bucket
goes back to the champion it replaced (compare-and-swap), and the line's `champion` alias follows it at once
in MLflow's Model Registry and as the `export.hub_repo`'s tag (functions/handlers/lineage.py roll_back)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import Any

from functions.cli import options, targets


def cmd_champion(args: argparse.Namespace) -> int:
    from functions.handlers import lineage

    backend = targets.backend_for(args)
    record = targets.get_record(backend, args.run)  # says where else a run id is found, as every command does
    if not args.rollback:
        promotion = record.promotion
        print(f"{record.run_id}: {promotion.describe() if promotion else 'no champion decision in its record'}")
        return 0
    with backend.writable() as store:
        # the Hub's champion tag is moved with the person's own token, as they push and pull with it
        project = getattr(getattr(backend, "settings", None), "project", None)  # the deployment's, for Vertex AI
        now, said = lineage.roll_back(
            store, record.run_id, dt.datetime.now(dt.UTC), os.environ.get("HF_TOKEN"), project
        )
    print(f"champion of {now.name}: {now.run_id} again (was {record.run_id}); {said}")
    return 0


def add_parsers(sub: Any) -> None:
    champion = options.add_target(
        sub.add_parser("champion", help="a run's champion decision; --rollback: its line's champion before it")
    )
    champion.add_argument("run", help="the champion run")
    champion.add_argument(
        "--rollback",
        action="store_true",
        help="make the champion it replaced the champion again (and move a tracked line's registry alias)",
    )
    champion.set_defaults(func=cmd_champion)
