"""`raytune doctor` reads whatever Google answers: an HTML page with 200, `null`, `[]`, objects with null fields or
fields of another type; each question is then unknown (never a crash, never ok). No credentials is one line and
exit 2; an error that quotes the request's Authorization header never prints the caller's token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from functions.adapters.google_rest import GoogleRest
from functions.cli.doctor import Doctor
from functions.cli.settings import CliSettings
from functions.core import doctor as d
from functions.core import errors

SETTINGS = CliSettings(
    project="p-doctor",
    region="us-central1",
    runs_bucket="p-doctor-runs",
    configs_bucket="p-doctor-configs",
    build_bucket="p-doctor-build",
    repository="raytune",
    name="raytune",
    gke_cluster="raytune",
    hf_token_secret="raytune-hf-token",
)
TOKEN = "ya29.a0AfB_byC-secretAccessToken0123456789"


class Answer:
    """What requests' Response offers the REST client."""

    def __init__(self, status: int, body: bytes):
        self.status_code, self.content = status, body
        self.text = body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


class Session:
    """Answers every request with one of `bodies`, in turn."""

    def __init__(self, bodies: list[tuple[int, bytes]]):
        self.bodies, self.asked = bodies, 0

    def request(self, method, url, **kwargs):
        status, body = self.bodies[self.asked % len(self.bodies)]
        self.asked += 1
        return Answer(status, body)


def no_cluster(spec):
    raise errors.TransientError("not reachable here")


JSONS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "projectNumber",
                    "state",
                    "status",
                    "services",
                    "config",
                    "name",
                    "versions",
                    "permissions",
                    "overallAccessState",
                    "serviceConfig",
                    "buildConfig",
                    "addonsConfig",
                    "currentMasterVersion",
                    "error",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)
ODD = st.sampled_from([b"<html><body>Sign in</body></html>", b"null", b"[]", b"{", b"\xff\xfe", b"", b"42"])
BODY = ODD | JSONS.map(lambda v: json.dumps(v).encode())


@settings(max_examples=150, deadline=None)
# (5xx are retried with backoff: not the subject here)
@given(st.lists(st.tuples(st.sampled_from([200, 200, 200, 400, 403, 404]), BODY), min_size=1, max_size=6))
def test_any_answer_to_any_question_is_ok_problem_or_unknown(bodies):
    findings, _ = Doctor(SETTINGS, GoogleRest(Session(bodies)), no_cluster).run()
    assert findings and {f.status for f in findings} <= {d.OK, d.PROBLEM, d.UNKNOWN}


@settings(max_examples=60, deadline=None)
@given(st.lists(ODD | st.sampled_from([b"{}", b'{"a": null}', b"[{}]", b'"text"']), min_size=1, max_size=4))
def test_answers_that_are_no_apis_object_are_never_ok(bodies):
    findings, _ = Doctor(SETTINGS, GoogleRest(Session([(200, b) for b in bodies])), no_cluster).run()
    ok = [f for f in findings if f.status == d.OK and f.check != "bucket"]
    # `{}` is an object: a bucket's testPermissions answers it for a caller holding none of those asked
    assert all(f.check in ("topic", "subscription", "image", "secret", "api") for f in ok), ok
    assert d.exit_code(findings) != 0


def test_an_error_quoting_the_requests_headers_prints_no_token():
    said = json.dumps({"error": {"message": f"bad request; headers: {{'Authorization': 'Bearer {TOKEN}'}}"}})
    rest = GoogleRest(Session([(400, said.encode())]))
    findings, _ = Doctor(SETTINGS, rest, no_cluster).run()
    report = d.report(findings)
    assert TOKEN not in report and "ya29." not in report and "[REDACTED]" in report


def test_no_credentials_is_one_line_and_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
    env.update(HOME=str(tmp_path), NO_GCE_CHECK="True", CLOUDSDK_CONFIG=str(tmp_path / "gcloud"))
    args = ["doctor", "--project", "p-doctor", "--bucket", "p-doctor-runs"]
    done = subprocess.run(
        [str(Path(sys.executable).parent / "raytune"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: no Google credentials: run `gcloud auth application-default login` (or set "
        "GOOGLE_APPLICATION_CREDENTIALS to a key file)"
    ]


def test_an_answer_whose_fields_are_all_null_is_unknown_never_ok():
    """A repository (or topic, subscription, image) that answers 200 with `{"name": null, ...}` names nothing:
    unknown, not ok."""
    null = json.dumps({"name": None, "format": None, "createTime": None}).encode()
    findings, _ = Doctor(SETTINGS, GoogleRest(Session([(200, null)])), no_cluster).run()
    asked = [f for f in findings if f.check in ("image", "topic", "subscription", "scheduler")]
    assert asked and all(f.status == d.UNKNOWN for f in asked), [(f.check, f.status) for f in asked]
    assert any("every field null" in (f.detail or "") for f in asked)


def test_a_multi_region_repository_is_asked_where_it_is():
    """raytune.toml's image_repository names the repository's multi-region: doctor asks Artifact Registry there,
    never in the deployment's region, where Terraform made none."""
    asked: list[str] = []

    class Recording(Session):
        def request(self, method, url, **kwargs):
            asked.append(url)
            return super().request(method, url, **kwargs)

    settings = CliSettings(**{**SETTINGS.__dict__, "image_repository": "us-docker.pkg.dev/p-doctor/raytune"})
    Doctor(settings, GoogleRest(Recording([(200, b'{"name": "x"}')])), no_cluster).run()
    repositories = [url for url in asked if "/repositories/raytune" in url and "/packages/" not in url]
    assert repositories and all("/locations/us/repositories/raytune" in url for url in repositories), repositories
