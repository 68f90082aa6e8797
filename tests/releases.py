"""The releases a deployment may roll back to, taken from CHANGELOG.md, and their own handlers served by
functions-framework from their own trees (git archive of the commit the changelog names), in a process of their
own, against the same emulators and Kubernetes API servers as this release's: what the version-skew tests run
(tests/integration/test_version_skew.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

from functions.core import release

ROOT = Path(__file__).resolve().parents[1]
# "## [0.2.0] - 2026-12-07" then, in its section, "Commit: `cbac668`".
HEADING = re.compile(r"^## \[(?P<version>[0-9]+\.[0-9]+\.[0-9]+)\] - (?P<date>\d{4}-\d{2}-\d{2})", re.M)
COMMIT = re.compile(r"^Commit: `(?P<commit>[0-9a-f]{7,40})`", re.M)


def changelog(text: str | None = None) -> list[tuple[str, str | None]]:
    """Each release of CHANGELOG.md, newest first: (version, its commit, None for one not yet landed)."""
    text = (ROOT / "CHANGELOG.md").read_text() if text is None else text
    headings = list(HEADING.finditer(text))
    found = []
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        section = text[heading.end() : following.start() if following else len(text)]
        commit = COMMIT.search(section)
        found.append((heading["version"], commit["commit"] if commit else None))
    return found


def previous() -> list[tuple[str, str]]:
    """The releases before this one that a deployment may roll back to (release.OLDEST_READER on), newest first."""

    return [
        (version, commit)
        for version, commit in changelog()
        if commit
        and release.version_key(release.OLDEST_READER)
        <= release.version_key(version)
        < release.version_key(release.VERSION)
    ]


def extracted(version: str, tmp_path_factory: Any) -> Path:
    """Release `version`'s own tree, extracted for a test module (skipped where this clone lacks its commit)."""
    import pytest

    commit = dict(previous())[version]
    found = tree(commit, tmp_path_factory.mktemp(f"release-{version}"))
    if found is None:
        pytest.skip(f"release {version} ({commit}) is not in this clone's history (a shallow clone?)")
    return found


def tree(commit: str, into: Path) -> Path | None:
    """The release's whole tree (its functions, trainer, main.py and its own test harness); None when this clone
    lacks the commit (a shallow clone)."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], check=False).returncode:
        return None
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], check=True, capture_output=True
    )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


# Runs in the release's own process, from its own tree: its test harness builds its controller on the emulators
# (its FakeClusterManager with a running cluster in each region, its Kube adapter on each region's API server), its
# clock read from a file the test writes, and its main.py's targets served by functions-framework.
BOOT = """
import datetime as dt, json, sys, threading
from pathlib import Path
import functions_framework
from werkzeug.serving import make_server
from functions.adapters.kube import Kube, api_client
from tests.fakes.pubsub import PubSub
from tests.harness import build_controller

args = json.loads(sys.argv[1])


def kube(server):
    token = server.get("token")
    return Kube(api_client(server["url"], token=token and (lambda: token), ca_file=server.get("ca")), timeout_s=(2.0, 10.0))


kubes = {region: kube(server) for region, server in args["kubes"].items()}
settings = dict(args["settings"])
if "policy" in settings:  # the release's own Policy, from the fields it knows
    from functions.core.policy import Policy

    settings["policy"] = Policy(**settings["policy"])
h = build_controller(args["bucket"], PubSub(), lambda cluster: kubes[cluster.location], **settings)
for region in args["kubes"]:
    path = f"projects/{args['project']}/locations/{region}/clusters/raytune"
    if path not in h.gke.clusters:
        h.gke.add_running(path)
    h.gke.clusters[path].location = region  # as GKE answers (an older fake left it out)
clock = Path(args["clock"])
h.ctx.clock = lambda: dt.datetime.fromisoformat(clock.read_text())
urls = {}
for target in ("launch", "watch"):
    app = functions_framework.create_app(target=target, source=args["main"], signature_type="cloudevent")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    urls[target] = f"http://127.0.0.1:{server.server_port}"
print(json.dumps(urls), flush=True)
sys.stdin.read()  # served until the test closes this pipe
"""


class Served:
    """A release's launch and watch over HTTP, its clock set from the test's before each request."""

    def __init__(self, version: str, urls: dict[str, str], clock_file: Path, process: subprocess.Popen):
        self.version, self.urls, self.clock_file, self.process = version, urls, clock_file, process

    def sync(self, now: Any) -> None:
        self.clock_file.write_text(now.isoformat())


@contextlib.contextmanager
def serve(
    version: str,
    root: Path,
    *,
    bucket: str,
    project: str,
    kubes: dict[str, dict[str, str]],
    settings: dict[str, Any],
    now: Any,
    log: Path,
) -> Iterator[Served]:
    """The release whose tree is `root`, serving until the block ends. `kubes`: each region's API server (its
    "url", and for a real one its bearer "token" and "ca" file); `settings`: its Settings' fields (a "policy" as
    its Policy's fields)."""
    clock_file = log.with_suffix(".clock")
    clock_file.write_text(now.isoformat())
    args = {
        "bucket": bucket,
        "project": project,
        "kubes": kubes,
        "settings": settings,
        "clock": str(clock_file),
        "main": str(root / "main.py"),
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
        "PYTHONPATH": str(root),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOT, json.dumps(args)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            process.wait(timeout=30)
            raise AssertionError(f"release {version} did not start: {log.read_text()[-3000:]}")
        yield Served(version, json.loads(line), clock_file, process)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
