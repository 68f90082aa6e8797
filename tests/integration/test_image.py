"""The trainer image: the Dockerfile is lint-clean (hadolint), its requirements are TRAINER_PIP and TRACKING_PIP, and they
resolve together for the image's Python (pip's resolver, nothing installed), and `raytune image` builds
what Terraform's repository and the cloud example expect."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name
from packaging.version import Version

from functions.cli import image
from functions.cli import main as cli
from functions.core.config import RAY_VERSION, TRACKING_PIP, TRAINER_PIP
from functions.core.config_file import parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_dockerfile_is_lint_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run([str(hadolint), str(ROOT / "image" / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (ROOT / "image" / "Dockerfile").read_text()
    assert f"ARG RAY_VERSION={RAY_VERSION}" in text and "FROM rayproject/ray:${RAY_VERSION}-py311-gpu" in text


def test_requirements_are_the_trainer_pins_and_the_tracking_clients():
    assert (ROOT / "image" / "requirements.txt").read_text() == image.requirements_text()
    pins = [line for line in image.requirements_text().splitlines() if not line.startswith("#")]
    assert pins == [*TRAINER_PIP, *TRACKING_PIP], "the image carries every destination's client"


def test_requirements_resolve_together(tmp_path):
    """pip's resolver over the pins and all their dependencies (a dry run: nothing is installed)."""
    report = tmp_path / "report.json"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "-r",
            str(ROOT / "image" / "requirements.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    resolved = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    for pin in TRAINER_PIP:
        name, version = pin.split("==")
        # A local build of a pin (torch 2.13.0+cpu on this machine) is that pin.
        assert Version(resolved[canonicalize_name(name)]).public == version, (
            name,
            resolved.get(canonicalize_name(name)),
        )


def test_raytune_image_builds_into_the_terraform_repository_as_its_own_identity(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no raytune.toml: Terraform's names for the default var.name
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "none.toml"))
    assert cli(["image", "--project", "proj", "--region", "europe-west4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    ref = f"europe-west4-docker.pkg.dev/proj/raytune/trainer:{RAY_VERSION}"
    assert "gcloud builds submit" in out and f"_IMAGE={ref}" in out and "image/cloudbuild.yaml" in out
    assert "--service-account=projects/proj/serviceAccounts/raytune-image-build@proj.iam.gserviceaccount.com" in out
    assert "--gcs-source-staging-dir=gs://raytune-build-proj/image-source" in out
    assert f"worker_image: {ref}" in out
    # The names Terraform gives them, and what it writes for the CLI.
    from tests.contract.iam import Deployment

    d = Deployment(project_id="proj", region="europe-west4")
    assert d.bucket("build") == "raytune-build-proj"
    sa = d.module._resource("google_service_account", "image_build").get("account_id")
    assert f"{sa}@proj.iam.gserviceaccount.com" == "raytune-image-build@proj.iam.gserviceaccount.com"
    cli_config = d.module.eval(
        next(b for b in d.module.blocks if b.kind == "output" and b.labels == ("cli_config",)).body["value"], {}
    )
    assert "build_bucket = " in cli_config and "image_build_service_account = " in cli_config
    # A build as a chosen identity must log to Cloud Logging only (Cloud Build refuses it otherwise).
    assert (
        yaml.safe_load((ROOT / "image" / "cloudbuild.yaml").read_text())["options"]["logging"] == "CLOUD_LOGGING_ONLY"
    )


def test_the_cloud_example_uses_the_image_and_marks_what_to_edit():
    text = (ROOT / "examples" / "cloud.yaml").read_text()
    cfg = parse_config(text, "yaml")
    assert cfg.cluster.dependencies == "image"
    assert cfg.cluster.worker_image and cfg.cluster.worker_image.endswith(f"/raytune/trainer:{RAY_VERSION}")
    assert (
        text.count("EDIT") >= 3
    )  # the images' project and region, the cluster's region (the reservation is Terraform's)


def test_the_image_runs_on_every_gpu_the_schema_offers():
    """From what pip resolves image/requirements.txt to on the image's platform (image/resolved.json, pip's own
    report): torch's CUDA build, NCCL and bitsandbytes carry code for B200 (sm_100), H200/H100 (sm_90), A100 and
    L4. resolved.json goes stale with requirements.txt: `raytune image --write-resolved` renews it."""
    from typing import get_args

    from functions.core import gpu_support
    from functions.core.config import Accelerator

    resolved = json.loads((ROOT / "image" / "resolved.json").read_text())["packages"]
    pins = dict(
        line.split("==") for line in (ROOT / "image" / "requirements.txt").read_text().splitlines() if "==" in line
    )
    assert {name.lower(): resolved.get(name.lower()) for name in pins} == {n.lower(): v for n, v in pins.items()}
    assert gpu_support.torch_cuda(resolved) == (13, 0)  # a CUDA 13.0 build: sm_75 to sm_120
    for accelerator in get_args(Accelerator):
        assert gpu_support.problems(resolved, accelerator) == [], accelerator


def test_an_image_that_would_not_run_on_b200_says_why():
    from functions.core import gpu_support

    resolved = json.loads((ROOT / "image" / "resolved.json").read_text())["packages"]
    cuda126 = {k: v for k, v in resolved.items() if k != "cuda-toolkit"} | {"nvidia-cuda-runtime-cu12": "12.6.77"}
    assert gpu_support.problems(cuda126, "B200")[0].endswith("(CUDA 12.6) carries no sm_100 code for B200")
    assert gpu_support.problems(cuda126, "H200") == []
    old_nccl = {k: v for k, v in resolved.items() if k != "nvidia-nccl-cu13"} | {"nvidia-nccl-cu12": "2.21.5"}
    assert gpu_support.problems(old_nccl, "B200") == [
        "NCCL ((12, 0)) is built without sm_100 for B200: it needs CUDA 12.8+"
    ]
    assert gpu_support.problems({**resolved, "bitsandbytes": "0.44.1"}, "B200") == [
        "bitsandbytes 0.44.1: no sm_100 build for B200 (0.45.3 is the first)"
    ]
    cpu = {k: v for k, v in resolved.items() if k != "cuda-toolkit"}
    assert "a CPU build" in gpu_support.problems(cpu, "L4")[0]


def test_a_two_region_deployment_builds_caches_and_pulls_one_image_from_its_multi_region_repository(
    capsys, monkeypatch, tmp_path
):
    """Terraform's image_location us: the repository is named once (cli_config's image_repository, as Terraform
    writes it into raytune.toml); `raytune image` builds in the deployment's region and pushes there, its cache
    builder pulls that image, and the config lines it prints (what every region's nodes pull) name it. A
    multi-region given as the build's region is refused with why."""
    from tests.contract.iam import Deployment

    d = Deployment(project_id="proj", region="us-central1", policy_regions=["us-east5"], image_location="us")
    repository = d.module._resource("google_artifact_registry_repository", "trainer")
    assert repository.get("location") == "us"
    (tmp_path / "raytune.toml").write_text(cli_config_as_written(d))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "raytune.toml"))
    ref = f"us-docker.pkg.dev/proj/{repository.get('repository_id')}/trainer:{RAY_VERSION}"
    assert cli(["image", "--dry-run", "--cache"]) == 0
    out = capsys.readouterr().out
    assert f"_IMAGE={ref}" in out and "--region=us-central1" in out, out
    assert "us-central1-docker.pkg.dev" not in out, "never the region's own repository, which Terraform did not make"
    assert f"worker_image: {ref}" in out and f"head_image: {ref}" in out
    cache_line = next(line for line in out.splitlines() if "cache.cloudbuild.yaml" in line)
    assert f"_IMAGE={ref}" in cache_line and "_ZONE=us-central1-b" in cache_line, cache_line
    assert cli(["image", "--dry-run", "--region", "us"]) == 2
    assert "is a multi-region: Cloud Build runs in a region" in capsys.readouterr().err


def cli_config_as_written(deployment) -> str:
    """raytune.toml as `terraform output -raw cli_config` writes it: the heredoc's interpolations filled in."""
    import tomllib

    from tests.contract.tfeval import _parse

    output = next(b for b in deployment.module.blocks if b.kind == "output" and b.labels == ("cli_config",))
    raw = tomllib.loads(str(deployment.module.eval(output.body["value"], {})))
    [filled] = _parse("locals {\n" + "".join(f'  {k} = "{v}"\n' for k, v in raw.items()) + "}\n")
    values = {k: str(deployment.module.eval(v, {})) for k, v in filled.body.items()}
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
