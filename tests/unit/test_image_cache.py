"""The worker image's cache disk (functions/core/image_cache.py): its path, the allowlist held against the CRD GKE
installs, the worker pods' node selector, the policy's bound on whose disk images a tenant may name, doctor's
verdict, and the Cloud Build that makes the disk with Google's builder (its flags as the pinned builder declares
them, Cloud Build's substitution rules)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from functions.core import image_cache, manifests
from functions.core.config import IMAGE_CACHE_NAME_MAX, RunConfig
from functions.core.policy import Policy

DATA = Path(__file__).parents[1] / "data"
ROOT = Path(__file__).parents[2]
PATH = "projects/team-proj/global/images/raytune-trainer-0123456789ab"
REF = "us-central1-docker.pkg.dev/team-proj/raytune/trainer:2.60.0"
DIGEST = "sha256:" + "0123456789ab" + "c" * 52


def run_config(**cluster) -> RunConfig:
    return RunConfig.model_validate({"cluster": {"worker_image": REF, "image_cache": PATH, **cluster}})


def test_a_path_names_the_project_and_an_image_whose_node_label_fits():
    assert image_cache.parse(PATH) == ("team-proj", "raytune-trainer-0123456789ab")
    [(key, value)] = image_cache.selector(PATH).items()
    assert key == f"{image_cache.SELECTOR_PREFIX}raytune-trainer-0123456789ab"
    assert value == "CONTAINER_IMAGE_CACHE.team-proj"
    assert len(key.rpartition("/")[2]) <= 63  # a Kubernetes label name
    longest = "projects/team-proj/global/images/" + "a" * IMAGE_CACHE_NAME_MAX
    assert len(next(iter(image_cache.selector(longest))).rpartition("/")[2]) == 63
    for bad in (
        longest + "a",
        "team-proj/raytune-trainer",
        "projects/team-proj/images/x",
        "projects/P/global/images/x",
    ):
        with pytest.raises(ValueError):
            image_cache.parse(bad)
        with pytest.raises(ValueError, match="projects/PROJECT/global/images/NAME"):
            RunConfig.model_validate({"cluster": {"image_cache": bad}})


def test_the_allowlist_fits_the_crd_gke_installs_and_allows_that_image_alone():
    schema = json.loads((DATA / "gcpresourceallowlist" / "gcpresourceallowlist.schema.json").read_text())
    allowlist = image_cache.allowlist(PATH, {"app.kubernetes.io/managed-by": "raytune"})
    jsonschema.validate(allowlist, schema)
    [pattern] = allowlist["spec"]["allowedResourcePatterns"]
    assert re.fullmatch(pattern, PATH) and re.search(pattern, PATH)
    for other in (PATH + "0", "projects/team-proj/global/images/raytune-trainer", PATH.replace("team-proj", "evil")):
        assert re.search(pattern, other) is None, other
    dotted = "projects/example.com:team/global/images/cache"
    [dotted_pattern] = image_cache.allowlist(dotted, {})["spec"]["allowedResourcePatterns"]
    assert re.search(dotted_pattern, "projects/exampleXcom:team/global/images/cache") is None
    assert image_cache.allowlist_name(PATH) != image_cache.allowlist_name(dotted)


def test_the_workers_ask_for_nodes_that_boot_with_it_and_the_launch_allows_it_first():
    objects = manifests.assemble(run_config(), "r1", {"trainer/__init__.py": b""}, "0" * 64)
    [group] = objects.cluster["spec"]["workerGroupSpecs"]
    selector = group["template"]["spec"]["nodeSelector"]
    assert selector[f"{image_cache.SELECTOR_PREFIX}raytune-trainer-0123456789ab"] == "CONTAINER_IMAGE_CACHE.team-proj"
    head = objects.cluster["spec"]["headGroupSpec"]["template"]["spec"].get("nodeSelector", {})
    assert not any(key.startswith(image_cache.SELECTOR_PREFIX) for key in head)
    kinds = [o["kind"] for o in objects.in_order()]
    assert kinds.index("GCPResourceAllowlist") < kinds.index("RayCluster")
    plain = manifests.assemble(RunConfig(), "r1", {"trainer/__init__.py": b""}, "0" * 64)
    assert plain.image_cache is None and "GCPResourceAllowlist" not in [o["kind"] for o in plain.in_order()]


def test_a_run_without_a_cache_writes_the_record_an_older_release_reads():
    assert "image_cache" not in RunConfig().model_dump(mode="json")["cluster"]
    assert run_config().model_dump(mode="json")["cluster"]["image_cache"] == PATH


def test_the_policy_bounds_whose_disk_images_a_config_may_name():
    policy = Policy(images=("*",), image_cache_projects=("team-proj",))
    assert not [v for v in policy.violations(run_config(), ()) if "image_cache" in v]
    other = run_config(image_cache="projects/someone-else/global/images/raytune-trainer-0123456789ab")
    [said] = [v for v in policy.violations(other, ()) if "image_cache" in v]
    assert said.startswith("policy image_cache_projects:") and "'someone-else'" in said
    assert not [v for v in Policy(images=("*",)).violations(other, ()) if "image_cache" in v]  # local: any


def test_the_verdict_holds_the_disk_against_the_build_the_tag_names_now():
    labels = image_cache.labels_for(REF, DIGEST)
    for value in labels.values():  # Compute Engine label values
        assert re.fullmatch(r"[a-z0-9_-]{0,63}", value)
    ready = {"status": "READY", "labels": labels}
    assert image_cache.verdict(REF, ready, DIGEST)[0]
    assert image_cache.verdict(REF, ready, None) == (
        True,
        f"READY, holds {REF} at sha256:0123456789ab (the tag's current build was not read)",
    )
    newer = "sha256:" + "f" * 64
    assert image_cache.verdict(REF, ready, newer)[1].startswith(f"holds an older build of {REF}")
    assert not image_cache.verdict(REF.replace("2.60.0", "2.61.0"), ready, DIGEST)[0]
    assert image_cache.verdict(REF, {"status": "PENDING", "labels": labels}, DIGEST) == (
        False,
        "status PENDING: GKE cannot attach it yet",
    )
    assert not image_cache.verdict(REF, {"status": "READY"}, DIGEST)[0]  # not made by raytune image --cache
    assert image_cache.disk_image_name(DIGEST) == "raytune-trainer-0123456789ab"
    image_cache.parse(f"projects/p-roject/global/images/{image_cache.disk_image_name(DIGEST)}")


def test_the_cache_build_runs_the_pinned_builder_with_flags_it_declares_and_sets_the_labels_doctor_reads():
    build = yaml.safe_load((ROOT / "image" / "cache.cloudbuild.yaml").read_text())
    builder = json.loads((DATA / "gke-disk-image-builder" / "flags.json").read_text())
    declared = set(builder["flags"])
    script = "\n".join(arg for step in build["steps"] for arg in step["args"])
    used = set(re.findall(r"--([a-z0-9-]+)=", script.split("go run ./cli", 1)[1]))
    assert used and used <= declared, used - declared
    assert build["substitutions"]["_BUILDER_COMMIT"] in builder["source"]
    # Cloud Build substitutes $NAME and ${NAME}: every one is a declared user substitution or a built-in; bash's own
    # variables are escaped as $$.
    referenced = set(re.findall(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)", script.replace("$$", "")))
    assert referenced <= set(build["substitutions"]) | {"PROJECT_ID", "BUILD_ID"}, referenced
    # The builder names its VM and disk `<job-name>-instance`, `<job-name>-disk` exactly: a job of each build's own
    # (a Cloud Build id is a UUID: 36 characters), within the builder's rule (under 50, a GCP resource name).
    [job] = re.findall(r'--job-name="([^"]+)"', script)
    made = job.replace("$BUILD_ID", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    names = builder["names"]
    assert len(made) < names["job_name_under"] and re.fullmatch(names["job_name_pattern"], made), made
    assert "$BUILD_ID" in job, "two builds in one zone would make the same VM and disk"
    assert "raytune-worker-image=${_IMAGE_LABEL}" in script and "raytune-digest=$${digest:7:40}" in script
    assert 'name="raytune-trainer-$${digest:7:12}"' in script  # image_cache.disk_image_name's rule


def test_raytune_image_cache_passes_what_doctor_later_checks(capsys):
    from functions.cli import main as cli

    assert cli(["image", "--project", "team-proj", "--region", "europe-west4", "--dry-run", "--cache"]) == 0
    out = capsys.readouterr().out
    [command] = [line for line in out.splitlines() if "cache.cloudbuild.yaml" in line]
    ref = "europe-west4-docker.pkg.dev/team-proj/raytune/trainer:2.60.0"
    assert f"_IMAGE={ref}," in command and f"_IMAGE_LABEL={image_cache.image_label(ref)}," in command
    assert "_ZONE=europe-west4-b," in command and "--no-source" in command
    assert "_NETWORK=default,_SUBNET=default," in command
    assert (
        cli(["image", "--project", "p", "--dry-run", "--cache", "--cache-network", "ml", "--cache-subnet", "ml-a"]) == 0
    )
    assert "_NETWORK=ml,_SUBNET=ml-a," in capsys.readouterr().out
    # The VM runs as the account Terraform's image_cache makes, its scratch space where Terraform lets it read.
    assert "_VM_ACCOUNT=raytune-image-cache@team-proj.iam.gserviceaccount.com " in command
    assert "_LOGS=gs://raytune-build-team-proj/image-cache/," in command
    assert "image_cache: projects/team-proj/global/images/raytune-trainer-<digest>" in out
