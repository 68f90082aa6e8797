"""`raytune image`: build the trainer image (image/Dockerfile) with Cloud Build and push it to the
project's Artifact Registry repository (terraform/image.tf); print the config lines that use it.

The build runs as its own service account (Terraform's image_build: reads the build bucket, pushes to the
repository, writes logs), not the project's default one, which new projects give no roles since mid-2024.
gcloud stages the source (what .gcloudignore leaves: the Dockerfile's inputs) in the build bucket."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Target:
    """Where the build runs and pushes: Terraform's names for a deployment called `name` unless given."""

    project: str
    region: str
    name: str = "raytune"  # Terraform's var.name
    repository: str | None = None
    build_bucket: str | None = None
    service_account: str | None = None  # an email

    @property
    def image(self) -> str:
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.repository or self.name}/trainer:{RAY_VERSION}"

    @property
    def staging(self) -> str:
        return f"gs://{self.build_bucket or f'{self.name}-build-{self.project}'}/image-source"

    @property
    def build_identity(self) -> str:
        email = self.service_account or f"{self.name}-image-build@{self.project}.iam.gserviceaccount.com"
        return f"projects/{self.project}/serviceAccounts/{email}"


def build_command(target: Target) -> list[str]:
    return [
        "gcloud",
        "builds",
        "submit",
        str(ROOT),
        f"--project={target.project}",
        f"--region={target.region}",
        f"--config={ROOT / 'image' / 'cloudbuild.yaml'}",
        f"--substitutions=_IMAGE={target.image},_RAY_VERSION={RAY_VERSION}",
        f"--service-account={target.build_identity}",
        f"--gcs-source-staging-dir={target.staging}",
    ]


def build(target: Target, dry_run: bool) -> tuple[str, str]:
    """Build and push; returns (the image, the command). The requirements file must match TRAINER_PIP."""
    if REQUIREMENTS.read_text() != requirements_text():
        raise RuntimeError(f"{REQUIREMENTS} is not TRAINER_PIP: run `raytune image --write-requirements`")
    image = target.image
    command = build_command(target)
    if not dry_run:
        if shutil.which("gcloud") is None:
            raise RuntimeError("gcloud is not installed: https://cloud.google.com/sdk/docs/install")
        subprocess.run(command, check=True)
    return image, shlex.join(command)
