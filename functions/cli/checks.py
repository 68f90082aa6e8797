"""What a valid config still lacks before it is worth running or uploading (`raytune validate`, `submit`)."""

from __future__ import annotations

from pathlib import Path

from functions.core import config as configs

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
