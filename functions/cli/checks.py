"""What a valid config still lacks before it is worth running or uploading (`raytune validate`, `local`, `submit`):
the checks run in the command's own process, before any cluster starts or anything is uploaded."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from functions.cli.settings import ENV, CliSettings
from functions.core import config as configs
from functions.core import config_file

# The examples' placeholders (examples/cloud.yaml, nightly.yaml: the lines marked EDIT).
PLACEHOLDERS = ("my-project", "my-a4-reservation", "my-data-bucket")


def placeholders(path: str) -> list[str]:
    """The examples' placeholders still in a config (the lines marked EDIT): it is not yours to upload yet."""
    found = []
    for number, line in enumerate(Path(path).read_text(errors="replace").splitlines(), 1):
        value = line.split("#", 1)[0]
        if hit := next((p for p in PLACEHOLDERS if p in value), None):
            found.append(f"{path}:{number}: {hit!r} is a placeholder of the example: {line.strip()}")
    return found


def missing_paths(path: str, cfg: configs.RunConfig) -> list[str]:
    """Local paths (dataset, adapter) the config names that do not exist on this machine."""
    return [
        f"{path}: {field} {location} does not exist on this machine"
        for field, location in (("dataset.id", cfg.dataset.id), ("training.init_adapter", cfg.training.init_adapter))
        if location and location.startswith("/") and not Path(location).exists()
    ]


def up_front(path: str, cfg: configs.RunConfig, named: str | None = None) -> tuple[list[str], int | None]:
    """validate's checks of what this machine can read: local paths that do not exist, and every row of a dataset
    on this machine read and checked as the trainer will (trainer/data.py check_rows). The problems (each naming
    the file), and the rows checked (None where none were read here: a hub id or gs:// is read by the job)."""
    named = named or path
    errors = [problem.replace(path, named, 1) for problem in missing_paths(path, cfg)]
    if errors or not cfg.dataset.id.startswith("/"):
        return errors, None
    from trainer.data import DataError, check_rows

    try:
        return [], check_rows(cfg.dataset)
    except DataError as err:
        return [f"{named}: {err}"], None


def launch_refusals(settings: CliSettings, path: str, named: str) -> list[str]:
    """Why the deployment's launch would refuse the config, judged by the launch's own judge (core/acceptance.py)
    under the deployment settings this command has (raytune.toml or RAYTUNE_*: the project, buckets, prices and the
    policy's capacity settings; the deployed function may have more of its policy, which `raytune doctor CONFIG`
    reads). None without the deployment's project and runs bucket (the launch needs both): a local run has no
    launch to pass."""
    if not (settings.cloud and settings.project):
        return []
    from functions.core import acceptance
    from functions.core.events import LaunchRequest
    from functions.handlers.settings import Settings

    rules = Settings.from_env({var: value for name, var in ENV.items() if (value := getattr(settings, name))})
    request = LaunchRequest(
        named, {"kind": "upload", "ref": "raytune validate"}, None, config_format=config_file.config_format(path)
    )
    verdict = acceptance.judge(request, acceptance.Document(Path(path).read_bytes()), rules, dt.datetime.now(dt.UTC))
    return [f"{named}: the launch would refuse it under {settings.source}: {error}" for error in verdict.errors]
