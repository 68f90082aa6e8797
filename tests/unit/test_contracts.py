"""Contracts between the parts: the trainer's pins agree everywhere they are written, the result the
trainer writes is the one the watcher reads, and the trainer ships only the shared contract modules."""

from __future__ import annotations

import tomllib
from pathlib import Path

from functions.core.config import RAY_VERSION, TRACKING_PIP, TRAINER_PIP, RunConfig
from functions.core.result import RunResult
from trainer.codehash import code_files

ROOT = Path(__file__).resolve().parents[2]


def _pins(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for requirement in requirements:
        name, _, version = requirement.partition("==")
        assert version, f"{requirement} is not pinned"
        pins[name.split("[")[0].lower()] = version
    return pins


def test_trainer_pins_agree_with_the_rayjob_runtime_env():
    extra = _pins(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["trainer"])
    runtime = _pins([*TRAINER_PIP, *TRACKING_PIP])  # a tracked run's runtime env adds its clients
    assert extra.pop("ray") == RAY_VERSION  # the image brings Ray; the runtime env does not reinstall it
    assert extra == runtime
    assert RunConfig().cluster.pip == list(TRAINER_PIP)


def test_result_json_round_trips_and_keeps_newer_fields():
    written = RunResult(
        run_id="r",
        adapter_path="gs://b/c/r/adapter",
        checkpoints=["gs://b/c/r/checkpoint_0"],
        metrics={"train_loss": 1.5, "global_step": 12, "best_checkpoint_by": "eval_loss"},
    )
    read = RunResult.model_validate_json(written.model_dump_json())
    assert read == written and read.metrics.global_step == 12
    newer = RunResult.model_validate({"run_id": "r", "flops": 3.0, "metrics": {"mfu": 0.4}})
    assert newer.model_dump()["flops"] == 3.0 and newer.metrics.model_dump()["mfu"] == 0.4


def test_the_trainer_ships_only_the_shared_contracts_and_what_they_import():
    """Derived from the trainer's imports (trainer/codehash.py): a new module here is a review's question."""
    shipped = {path for path in code_files() if path.startswith("functions/")}
    assert shipped == {
        "functions/__init__.py",
        "functions/core/__init__.py",
        "functions/core/config.py",
        "functions/core/result.py",
        "functions/core/release.py",  # the trainer's release: stamped on result.json, its --version
        "functions/core/gpu_shapes.py",  # config.py: which machine types carry each accelerator
        "functions/core/sweep.py",  # config.py's sweep section; the trainer draws each trial's config with it
        "functions/core/fields.py",  # sweep.py: a trial's fields set by their dotted names
        "functions/core/gpu_driver.py",  # the preflight: the oldest driver that runs the image's CUDA
        "functions/core/gpu_support.py",  # the preflight: the CUDA a torch build needs, from its packages
        "functions/core/tracking.py",  # config.py's tracking section; the trainer's loggers are its rows
        "functions/core/errors.py",  # the trainer's tracking: a failed send described as the controller does
        "functions/core/secrets.py",  # the trainer's tracking: a tracker's error redacted before it is stored
        "functions/core/capacity.py",  # config.py's capacity options; the trainer's checkpoint cadence by kind
    }
