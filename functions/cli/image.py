"""`raytune image`: build the trainer image (image/Dockerfile) with Cloud Build and push it to the
project's Artifact Registry repository (terraform/image.tf); print the config lines that use it. `--cache` then
makes the image's cache disk (image/cache.cloudbuild.yaml: Google's gke-disk-image-builder), which GPU nodes boot
with so they do not pull the image (functions/core/image_cache.py).

The build runs as its own service account (Terraform's image_build: reads the build bucket, pushes to the
repository, writes logs), not the project's default one, which new projects give no roles since mid-2024.
gcloud stages the source (what .gcloudignore leaves: the Dockerfile's inputs) in the build bucket."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from functions.core import image_cache
from functions.core.config import RAY_VERSION, TRACKING_PIP, TRAINER_PIP
from trainer.codehash import ROOT

REQUIREMENTS = ROOT / "image" / "requirements.txt"
HEADER = "# TRAINER_PIP and TRACKING_PIP (functions/core/config.py): raytune image --write-requirements\n"


def requirements_text() -> str:
    return HEADER + "\n".join((*TRAINER_PIP, *TRACKING_PIP)) + "\n"


def write_requirements(path: Path = REQUIREMENTS) -> Path:
    path.write_text(requirements_text())
    return path


RESOLVED = ROOT / "image" / "resolved.json"
# The image's platform (rayproject/ray's GPU images: Ubuntu 22.04, glibc 2.35, CPython 3.11): every manylinux tag
# such a system takes, so pip picks the wheels the image's own pip install would.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]


def resolve_command(report: Path) -> list[str]:
    """pip's resolution of image/requirements.txt for the image's platform, as a report: metadata only (PyPI
    serves it apart from the wheels), nothing installed; --isolated: PyPI as the image sees it, not local config."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return [
        *("pip", "--isolated", "install", "--dry-run", "--quiet", "--ignore-installed", "--only-binary=:all:"),
        *platforms,
        *("--python-version", "3.11", "--implementation", "cp", "--target", str(report.parent / "target")),
        *("--report", str(report), "-r", str(REQUIREMENTS)),
    ]


def write_resolved(path: Path = RESOLVED) -> Path:
    """image/resolved.json: every package and version the image's pip install resolves to, from pip's report."""
    import json
    import os
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = resolve_command(report)
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
        subprocess.run([sys.executable, "-m", *command], check=True, env=env)
        installed = json.loads(report.read_text())["install"]
    packages = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installed}
    made = "raytune image --write-resolved (" + shlex.join([*command[:3], "...", "-r", "image/requirements.txt"]) + ")"
    body = {
        "made_with": made,
        "platform": "x86_64 CPython 3.11, manylinux <= 2.35",
        "packages": dict(sorted(packages.items())),
    }
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


# Artifact Registry's multi-regions (https://cloud.google.com/artifact-registry/docs/repositories/repo-locations):
# a repository may be there; a build may not.
MULTI_REGIONS = frozenset({"us", "europe", "asia"})


@dataclass(frozen=True)
class Target:
    """Where the build runs and pushes: Terraform's names for a deployment called `name` unless given."""

    project: str
    region: str
    name: str = "raytune"  # Terraform's var.name
    repository: str | None = None
    build_bucket: str | None = None
    service_account: str | None = None  # an email
    # The repository's whole path (raytune.toml's image_repository, from Terraform): where the image is pushed
    # and every region pulls it; None: the repository in `region`, as a single-region deployment makes it.
    image_repository: str | None = None

    def __post_init__(self) -> None:
        if self.region in MULTI_REGIONS:
            raise RuntimeError(
                f"--region {self.region} is a multi-region: Cloud Build runs in a region (give the deployment's "
                "region); the image goes to the repository raytune.toml's image_repository names (Terraform's "
                "image_location), which every region pulls"
            )

    @property
    def image(self) -> str:
        if self.image_repository:
            return f"{self.image_repository.rstrip('/')}/trainer:{RAY_VERSION}"
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.repository or self.name}/trainer:{RAY_VERSION}"

    @property
    def bucket(self) -> str:
        """The build bucket: the staged source, the cache build's logs."""
        return f"gs://{self.build_bucket or f'{self.name}-build-{self.project}'}"

    @property
    def staging(self) -> str:
        return f"{self.bucket}/image-source"

    @property
    def cache_vm_account(self) -> str:
        """The cache builder VM's identity Terraform makes with image_cache=true (terraform/image.tf)."""
        return f"{self.name}-image-cache@{self.project}.iam.gserviceaccount.com"

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
    """Build and push; returns (the image, the command). The requirements file must match TRAINER_PIP and TRACKING_PIP."""
    if REQUIREMENTS.read_text() != requirements_text():
        raise RuntimeError(
            f"{REQUIREMENTS} is not TRAINER_PIP and TRACKING_PIP: run `raytune image --write-requirements`"
        )
    image = target.image
    command = build_command(target)
    if not dry_run:
        gcloud(command)
    return image, shlex.join(command)


def gcloud(command: list[str], capture: bool = False) -> str:
    """Run a gcloud command (its output, when captured); a clear error where gcloud is not installed."""
    if shutil.which("gcloud") is None:
        raise RuntimeError("gcloud is not installed: https://cloud.google.com/sdk/docs/install")
    return subprocess.run(command, check=True, capture_output=capture, text=True).stdout or ""


@dataclass(frozen=True)
class Cache:
    """Where the cache disk is made: the builder's VM runs in `zone` as `vm_account` (it pulls the image: Artifact
    Registry read; the deployment's image-cache account unless given), its scratch space is under the build
    bucket (image-cache/, where Terraform lets the build write and the VM read)."""

    zone: str
    disk_gb: int = 100
    vm_account: str | None = None
    network: str = "default"  # the VM's VPC network and its subnetwork in the zone's region, by name
    subnet: str = "default"


def cache_command(target: Target, cache: Cache) -> list[str]:
    ref = target.image
    logs = f"{target.bucket}/image-cache/"
    substitutions = {
        "_IMAGE": ref,
        "_IMAGE_LABEL": image_cache.image_label(ref),
        "_FAMILY": image_cache.FAMILY,
        "_ZONE": cache.zone,
        "_NETWORK": cache.network,
        "_SUBNET": cache.subnet,
        "_LOGS": logs,
        "_DISK_GB": str(cache.disk_gb),
        "_VM_ACCOUNT": cache.vm_account or target.cache_vm_account,
    }
    return [
        "gcloud",
        "builds",
        "submit",
        "--no-source",
        f"--project={target.project}",
        f"--region={target.region}",
        f"--config={ROOT / 'image' / 'cache.cloudbuild.yaml'}",
        "--substitutions=" + ",".join(f"{k}={v}" for k, v in substitutions.items()),
        f"--service-account={target.build_identity}",
    ]


def digest_command(target: Target) -> list[str]:
    return [
        "gcloud",
        "artifacts",
        "docker",
        "images",
        "describe",
        target.image,
        f"--project={target.project}",
        "--format=value(image_summary.digest)",
    ]


def build_cache(target: Target, cache: Cache, dry_run: bool) -> tuple[str | None, str]:
    """Make the cache disk of the pushed image; returns (its path for cluster.image_cache, None in a dry run;
    the command)."""
    command = cache_command(target, cache)
    if dry_run:
        return None, shlex.join(command)
    gcloud(command)
    digest = gcloud(digest_command(target), capture=True).strip()
    return f"projects/{target.project}/global/images/{image_cache.disk_image_name(digest)}", shlex.join(command)
