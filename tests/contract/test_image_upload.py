"""What Cloud Build receives from `raytune image`, asked of gcloud itself: `gcloud meta list-files-for-upload`
runs the same .gcloudignore code as `gcloud builds submit`. Every source of every COPY/ADD in
image/Dockerfile must be among the uploaded files, and the image must carry the code the ConfigMap ships."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from trainer.codehash import ROOT, code_files

DOCKERFILE = ROOT / "image" / "Dockerfile"


def uploaded(source: Path) -> set[str]:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("gcloud is not installed: the upload contract needs gcloud's own ignore code")
    out = subprocess.run(
        [gcloud, "meta", "list-files-for-upload", str(source)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def copy_sources(dockerfile: str) -> list[str]:
    """The build-context paths of every COPY and ADD (shell and JSON forms, flags skipped, lines joined)."""
    sources = []
    for line in dockerfile.replace("\\\n", " ").splitlines():
        words = line.strip().split(maxsplit=1)
        if len(words) < 2 or words[0].upper() not in ("COPY", "ADD"):
            continue
        rest = words[1].strip()
        args = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        args = [a for a in args if not a.startswith("--")]
        sources += args[:-1]  # the last one is the destination
    return sources


def is_sent(path: str, files: set[str]) -> bool:
    path = path.rstrip("/")
    return path in files or any(f.startswith(f"{path}/") for f in files)


def test_every_dockerfile_input_is_uploaded():
    files = uploaded(ROOT)
    sources = copy_sources(DOCKERFILE.read_text())
    assert sources, "no COPY in image/Dockerfile"
    missing = [s for s in sources if not is_sent(s, files)]
    assert not missing, f"gcloud builds submit would not send {missing} (sent: {sorted(files)})"


def test_the_image_carries_the_code_the_configmap_ships():
    files = uploaded(ROOT)
    sources = copy_sources(DOCKERFILE.read_text())
    shipped = set(code_files())
    copied = {f for f in shipped if any(f == s or f.startswith(f"{s.rstrip('/')}/") for s in sources)}
    assert copied == shipped, f"the ConfigMap ships {sorted(shipped - copied)} that image/Dockerfile does not copy"
    assert shipped <= files, f"not uploaded: {sorted(shipped - files)}"


def test_the_upload_leaves_out_what_the_build_does_not_need():
    files = uploaded(ROOT)
    assert not {f for f in files if f.startswith((".venv", "tests/", "terraform/", ".git/", "build/", ".raytune"))}
    assert not any("__pycache__" in f for f in files)
    # The controller's adapters and handlers stay out (the image holds the trainer and its two contracts).
    assert not {f for f in files if f.startswith(("functions/adapters/", "functions/handlers/", "functions/cli/"))}


def test_gitignore_rules_apply_as_gcloud_reads_them(tmp_path):
    """The pattern this repository depends on, on a tree of its own: a file under an excluded folder comes
    back only when its folder is re-included first (what the old .gcloudignore got wrong)."""
    for name in ("keep/sub/a.py", "keep/sub/b.py", "keep/other.py", "drop.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / ".gcloudignore").write_text("*\n!keep/sub/a.py\n")
    assert uploaded(tmp_path) == set()  # the old pattern: nothing under keep/ comes back
    (tmp_path / ".gcloudignore").write_text("/*\n!/keep/\n/keep/*\n!/keep/sub/\n/keep/sub/*\n!/keep/sub/a.py\n")
    assert uploaded(tmp_path) == {"keep/sub/a.py"}


def test_raytune_image_through_gcloud_as_the_operator_and_what_the_build_identity_reads(
    gcs_emulator, tmp_path, monkeypatch
):
    """`raytune image` for real: gcloud's own `builds submit` (its bucket check, its upload, its CreateBuild)
    against a Cloud Build stand-in and a GCS that enforces an operator's Terraform grants; then the staged
    archive read as the image build's identity, holding every file the Dockerfile copies."""
    import io
    import os
    import tarfile

    from functions.cli import main as cli
    from functions.core import permissions as p
    from tests.contract.iam import Deployment, assert_listed, client_at, serving
    from tests.fakes.cloudbuild import FakeCloudBuild
    from tests.fakes.gcs_iam import IamGcs

    if shutil.which("gcloud") is None:
        pytest.skip("gcloud is not installed: this runs gcloud's own builds submit")
    operator = "user:ops@example.com"
    d = Deployment(project_id=f"img{os.getpid()}", operators=[operator])
    build_bucket = d.bucket("build")
    client_at(gcs_emulator.url).create_bucket(build_bucket)
    token = tmp_path / "token"
    token.write_text("ya29.fake-operator-token")
    as_operator = IamGcs(gcs_emulator.url, operator.removeprefix("user:"), d.storage_permissions(p.OPERATOR, operator))
    builds = FakeCloudBuild().start()
    try:
        with serving(as_operator) as url:
            gcloud_env = {
                "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
                "CLOUDSDK_CORE_PROJECT": d.project,
                "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": str(token),
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{url}/storage/v1/",
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBUILD": builds.url + "/",
                "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
                "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
                "RAYTUNE_CLI_CONFIG": str(tmp_path / "none.toml"),
            }
            for name, value in gcloud_env.items():
                monkeypatch.setenv(name, value)
            assert cli(["image", "--project", d.project, "--region", "us-central1"]) == 0
    finally:
        builds.stop()
    assert not builds.unknown, builds.unknown
    [request] = builds.builds
    assert (
        request["serviceAccount"]
        == f"projects/{d.project}/serviceAccounts/raytune-image-build@{d.project}.iam.gserviceaccount.com"
    )
    assert request["options"]["logging"] == "CLOUD_LOGGING_ONLY"
    assert request["substitutions"]["_IMAGE"].startswith(f"us-central1-docker.pkg.dev/{d.project}/raytune/trainer:")
    source = request["source"]["storageSource"]
    assert source["bucket"] == build_bucket and source["object"].startswith("image-source/")
    assert_listed(d, as_operator, p.OPERATOR)

    # Cloud Build fetches the source as the build's identity; here google-cloud-storage does, without its
    # background bucket reads (functions/adapters/gcs.py turns them off the same way).
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    as_build = IamGcs(gcs_emulator.url, "raytune-image-build", d.storage_permissions(p.IMAGE_BUILD))
    with serving(as_build) as url:
        archive = client_at(url).bucket(build_bucket).blob(source["object"]).download_as_bytes()
    assert_listed(d, as_build, p.IMAGE_BUILD)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}
    sources = copy_sources(DOCKERFILE.read_text())
    assert all(is_sent(s, names) for s in sources), sorted(names)
    assert set(code_files()) <= names
