"""The first apply waits for IAM, not for luck: terraform/scripts/await-function-build-access, run with the
environment Terraform gives it (terraform/iam.tf, evaluated), through gcloud's own `builds submit` and `builds
describe`, against a Cloud Build stand-in that fetches each build's staged source as the function build
identity through a GCS enforcing Terraform's grants. IAM's propagation is played: the grant that exists is
not yet effective for the first builds."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from google.api_core import exceptions

from functions.core import permissions as p
from tests.contract.iam import Deployment, client_at, serving
from tests.fakes.cloudbuild import FakeCloudBuild, Outcome
from tests.fakes.gcs_iam import IamGcs

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed: the probe runs it")


class Propagation:
    """The build identity's storage grants, as IAM enforces them once effective: refused until `builds`
    builds have tried (a grant written but not yet propagated); `None`: never (a grant that does not exist)."""

    def __init__(self, deployment: Deployment, effective_from: int | None):
        self.granted = deployment.storage_permissions(p.FUNCTION_BUILD)
        self.effective_from = effective_from
        self.tried = 0

    def allowed(self, resource: str, permission: str) -> bool:
        effective = self.effective_from is not None and self.tried >= self.effective_from
        return effective and self.granted(resource, permission)


def run_probe(tmp_path: Path, gcs_emulator, deployment: Deployment, play, **limits: str):
    """The script as Terraform's local-exec runs it; the builds it asked for, played by `play`."""
    [access] = deployment.module.instances("terraform_data")
    [provisioner] = access.blocks("provisioner")
    scope = dict(access.scope)
    environment = {k: str(v) for k, v in deployment.module.eval(provisioner.body["environment"], scope).items()}
    environment["BUILD_ACCOUNT"] = f"raytune-function-build@{deployment.project}.iam.gserviceaccount.com"
    command = deployment.module.eval(provisioner.body["command"], scope)
    client_at(gcs_emulator.url).create_bucket(deployment.bucket("build"))
    token = tmp_path / "token"
    token.write_text("ya29.fake-applier-token")
    builds = FakeCloudBuild(play).start()
    try:
        env = {
            **os.environ,
            **environment,
            **limits,
            "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": str(token),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{gcs_emulator.url}/storage/v1/",
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBUILD": builds.url + "/",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
        }
        started = time.monotonic()
        done = subprocess.run(["bash", command], env=env, capture_output=True, text=True, timeout=300)
        elapsed = time.monotonic() - started
    finally:
        builds.stop()
    assert not builds.unknown, builds.unknown
    return done, builds, environment, elapsed


def fetching_as_build_identity(deployment: Deployment, iam: Propagation, proxy_url: str):
    """Cloud Build's fetch step: the staged source read as the build's own identity; refused as Cloud Build
    reports it (hashicorp/terraform-provider-google#20571's message)."""

    def play(build: dict) -> Outcome:
        assert build["serviceAccount"].endswith(
            "/raytune-function-build@" + deployment.project + ".iam.gserviceaccount.com"
        )
        assert build["options"]["logging"] == "CLOUD_LOGGING_ONLY"
        source = build["source"]["storageSource"]
        try:
            client_at(proxy_url).bucket(source["bucket"]).blob(source["object"]).download_as_bytes()
        except exceptions.Forbidden:
            return "FAILURE", {
                "type": "FETCH_SOURCE_FAILED",
                "detail": f"failed to Fetch: Access to bucket {source['bucket']} denied. You must grant Storage "
                "Object Viewer permission to raytune-function-build.",
            }
        finally:
            iam.tried += 1
        return "SUCCESS", {}

    return play


@pytest.mark.parametrize("refused", [0, 3])
def test_the_apply_goes_on_once_the_build_identity_is_let_in(tmp_path, gcs_emulator, monkeypatch, refused):
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    deployment = Deployment(project_id=f"probe{os.getpid()}x{refused}")
    iam = Propagation(deployment, effective_from=refused)
    with serving(IamGcs(gcs_emulator.url, "raytune-function-build", iam.allowed)) as url:
        done, builds, environment, elapsed = run_probe(
            tmp_path, gcs_emulator, deployment, fetching_as_build_identity(deployment, iam, url), INTERVAL_S="0.2"
        )
    assert done.returncode == 0, done.stderr
    assert len(builds.builds) == refused + 1
    assert [status for status, _ in builds.ends.values()] == ["FAILURE"] * refused + ["SUCCESS"]
    staging = environment["STAGING"].removeprefix("gs://").split("/", 1)
    assert all(b["source"]["storageSource"]["bucket"] == staging[0] for b in builds.builds)
    assert all(b["source"]["storageSource"]["object"].startswith(staging[1] + "/") for b in builds.builds)
    assert f"{refused + 1} probe build(s)" in done.stdout
    assert done.stderr.count("not yet effective") == refused
    print(f"probe with {refused} refusals: {elapsed:.1f} s")


def test_a_grant_that_never_takes_effect_fails_the_apply_naming_it(tmp_path, gcs_emulator, monkeypatch):
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    deployment = Deployment(project_id=f"probe{os.getpid()}never")
    iam = Propagation(deployment, effective_from=None)
    with serving(IamGcs(gcs_emulator.url, "raytune-function-build", iam.allowed)) as url:
        done, builds, environment, _ = run_probe(
            tmp_path,
            gcs_emulator,
            deployment,
            fetching_as_build_identity(deployment, iam, url),
            INTERVAL_S="0.2",
            TIMEOUT_S="1",
        )
    assert done.returncode == 1
    assert "still refused" in done.stderr and environment["BUILD_ACCOUNT"] in done.stderr
    assert "FETCH_SOURCE_FAILED" in done.stderr and "terraform apply again" in done.stderr
    assert builds.builds  # it tried


def test_a_build_that_fails_otherwise_stops_the_apply_at_once(tmp_path, gcs_emulator):
    deployment = Deployment(project_id=f"probe{os.getpid()}step")
    step_failed: Outcome = ("FAILURE", {"type": "USER_BUILD_STEP", "detail": "step 0 exited 1"})
    done, builds, _, _ = run_probe(tmp_path, gcs_emulator, deployment, lambda build: step_failed, INTERVAL_S="0.2")
    assert done.returncode == 1 and len(builds.builds) == 1
    assert "not a refusal" in done.stderr and "step 0 exited 1" in done.stderr


def test_the_staged_probe_is_read_under_the_grant_that_reads_the_functions_sources():
    """One binding reads both: what the probe proves effective is the binding a function's build fetches with."""
    deployment = Deployment()
    roles = deployment.roles()
    [sources] = deployment.names("bucket:gcf-sources")
    probe = f"projects/_/buckets/{deployment.bucket('build')}/objects/function-build-probe/1-a.tgz"
    readers = [
        g
        for g in deployment.grants()
        if g.identity == p.FUNCTION_BUILD and "storage.objects.get" in roles[g.role] and g.applies_to(probe)
    ]
    assert [g.address for g in readers] == ["google_project_iam_member.function_build_sources"]
    assert readers[0].applies_to(f"projects/_/buckets/{sources}/objects/fn/function-source.zip")
