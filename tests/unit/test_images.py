"""Allowed images matched on the reference as a container runtime parses it, never as a glob over the string:
the escapes an fnmatch pattern let through (issue 21) are refused, the images the defaults mean are admitted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.core import images
from functions.core.config import RunConfig
from functions.handlers.settings import policy_from_env

pytestmark = pytest.mark.unit
PROJECT_REGISTRY = "*-docker.pkg.dev/proj/*"


@pytest.mark.parametrize(
    ("image", "pattern", "ok"),
    [
        ("rayproject/ray:2.60.0-py311-gpu", "rayproject/*", True),
        ("docker.io/rayproject/ray:2.60.0", "rayproject/*", True),
        ("index.docker.io/rayproject/ray:1", "rayproject/*", False),  # another domain, whatever docker resolves
        ("us-central1-docker.pkg.dev/proj/raytune/trainer:2.60.0", PROJECT_REGISTRY, True),
        ("europe-west4-docker.pkg.dev/proj/r/t@sha256:" + "a" * 64, PROJECT_REGISTRY, True),
        # The escapes of fnmatch's `*`, which crosses `/` and `.`:
        ("evil.example.com/us-docker.pkg.dev/proj/ray:x", PROJECT_REGISTRY, False),
        ("us-docker.pkg.dev.evil.com/proj/ray:x", PROJECT_REGISTRY, False),
        ("evil.com/x-docker.pkg.dev/proj/y", PROJECT_REGISTRY, False),
        ("us-docker.pkg.dev/proj-evil/ray:x", PROJECT_REGISTRY, False),
        ("us-docker.pkg.dev/other/proj/ray:x", PROJECT_REGISTRY, False),
        ("us.x-docker.pkg.dev/proj/ray:x", PROJECT_REGISTRY, False),  # the wildcard is one DNS label
        ("us-docker.pkg.dev/proj", PROJECT_REGISTRY, False),  # the project itself is no image
        ("evil/rayproject/ray", "rayproject/*", False),
        ("rayproject.evil.com/ray", "rayproject/*", False),
        ("localhost:5000/rayproject/ray", "rayproject/*", False),
        ("ubuntu", "ubuntu", True),  # docker.io/library/ubuntu
        ("docker.io/library/ubuntu:22.04", "ubuntu", True),
        ("UPPER/case", "*", True),  # `*` alone admits everything (the local default)
        ("not a reference", "rayproject/*", False),
    ],
)
def test_patterns_match_the_parsed_reference(image, pattern, ok):
    assert images.allowed(image, pattern) is ok


def test_references_parse_as_runtimes_resolve_them():
    assert images.parse("ubuntu") == images.Reference("docker.io", "library/ubuntu")
    assert images.parse("rayproject/ray:2.60.0") == images.Reference("docker.io", "rayproject/ray", "2.60.0")
    assert images.parse("localhost:5000/a/b:t") == images.Reference("localhost:5000", "a/b", "t")
    digest = "sha256:" + "b" * 64
    assert images.parse(f"us-docker.pkg.dev/p/r/t@{digest}") == images.Reference(
        "us-docker.pkg.dev", "p/r/t", None, digest
    )


@given(
    prefix=st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True), rest=st.from_regex(r"[a-z0-9/._-]{0,30}", fullmatch=True)
)
def test_nothing_put_in_front_of_the_project_registry_passes(prefix, rest):
    """Whatever is put before an allowed reference makes another domain, which the pattern refuses."""
    image = f"{prefix}/us-docker.pkg.dev/proj/{rest}ray:1"
    assert not images.allowed(image, PROJECT_REGISTRY)


def test_the_policy_uses_them_for_head_and_worker_images():
    policy = policy_from_env({"RAYTUNE_PROJECT": "proj"})
    escape = "evil.example.com/us-docker.pkg.dev/proj/ray:x"
    cfg = RunConfig.model_validate({"storage_path": "gs://runs-b/c", "cluster": {"worker_image": escape}})
    [found] = policy.violations(cfg, ("runs-b",))
    assert found.startswith(f"policy images: cluster.worker_image {escape!r} is not from an allowed registry")
    ok = RunConfig.model_validate(
        {"storage_path": "gs://runs-b/c", "cluster": {"worker_image": "us-docker.pkg.dev/proj/raytune/trainer:2.60.0"}}
    )
    assert policy.violations(ok, ("runs-b",)) == []
