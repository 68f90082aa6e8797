"""`raytune image`: build the trainer image (image/Dockerfile) with Cloud Build and push it to the
project's Artifact Registry repository (terraform/image.tf); print the config lines that use it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from functions.core.config import RAY_VERSION, TRAINER_PIP
from trainer.codehash import ROOT

REQUIREMENTS = ROOT / "image" / "requirements.txt"
HEADER = "# TRAINER_PIP (functions/core/config.py): raytune image --write-requirements\n"


def requirements_text() -> str:
    return HEADER + "\n".join(TRAINER_PIP) + "\n"


def write_requirements(path: Path = REQUIREMENTS) -> Path:
    path.write_text(requirements_text())
    return path


def image_ref(project: str, region: str, repository: str = "raytune", ray_version: str = RAY_VERSION) -> str:
    return f"{region}-docker.pkg.dev/{project}/{repository}/trainer:{ray_version}"


def build_command(project: str, region: str, image: str, ray_version: str = RAY_VERSION) -> list[str]:
    return [
        "gcloud",
        "builds",
        "submit",
        str(ROOT),
        f"--project={project}",
        f"--region={region}",
        f"--config={ROOT / 'image' / 'cloudbuild.yaml'}",
        f"--substitutions=_IMAGE={image},_RAY_VERSION={ray_version}",
    ]


def build(project: str, region: str, repository: str, dry_run: bool) -> tuple[str, str]:
    """Build and push; returns (the image, the command). The requirements file must match TRAINER_PIP."""
    if REQUIREMENTS.read_text() != requirements_text():
        raise RuntimeError(f"{REQUIREMENTS} is not TRAINER_PIP: run `raytune image --write-requirements`")
    image = image_ref(project, region, repository)
    command = build_command(project, region, image)
    if not dry_run:
        if shutil.which("gcloud") is None:
            raise RuntimeError("gcloud is not installed: https://cloud.google.com/sdk/docs/install")
        subprocess.run(command, check=True)
    return image, shlex.join(command)
