"""The worker image preloaded on a GPU node's secondary boot disk, so a cold A4 node starts the trainer without
pulling its image (several GB with CUDA torch).

GKE facts this follows (read 2026-12):
- "Use secondary boot disks to preload data or container images"
  (https://cloud.google.com/kubernetes-engine/docs/how-to/data-container-image-preloading): Autopilot from
  1.30.1-gke.1329000; the disk image is made from container images by gke-disk-image-builder
  (https://github.com/ai-on-gke/tools/tree/main/gke-disk-image-builder); GKE attaches a disk made from it to
  each new node, in parallel with the node's provisioning, and containerd reads the cached layers from it.
- On Autopilot a pod asks for it with the node selector
  `cloud.google.com.node-restriction.kubernetes.io/gke-secondary-boot-disk-IMAGE: CONTAINER_IMAGE_CACHE.PROJECT`
  and the cluster must allow the disk image with a `GCPResourceAllowlist` (`node.gke.io/v1`, cluster-scoped,
  `spec.allowedResourcePatterns`: its schema as GKE installs it, vendored in tests/data/gcpresourceallowlist/).
  The label's name part (`gke-secondary-boot-disk-` and the image's name) is a Kubernetes label name: at most 63
  characters, so the disk image's name at most 39.

The disk image carries labels that say which build of the worker image it holds (`raytune image --cache` sets
them): `doctor` compares them with the image the run uses."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from functions.core.config import image_cache_match

SELECTOR_PREFIX = "cloud.google.com.node-restriction.kubernetes.io/gke-secondary-boot-disk-"
MODE = "CONTAINER_IMAGE_CACHE"
API_VERSION = "node.gke.io/v1"
FAMILY = "raytune-trainer-cache"  # the family every disk image `raytune image --cache` makes belongs to
# The disk image's labels (Compute Engine label values: at most 63 lowercase letters, digits, - and _).
IMAGE_LABEL = "raytune-worker-image"  # a hash of the worker image's reference
DIGEST_LABEL = "raytune-digest"  # the first 40 hex digits of the cached build's sha256 digest
DIGEST_KEPT = 40


def parse(path: str) -> tuple[str, str]:
    """(project, image name) of projects/PROJECT/global/images/NAME; ValueError when it is not one."""
    match = image_cache_match(path)
    return match[1], match[2]


def selector(path: str) -> dict[str, str]:
    """The node selector that asks Autopilot for a node with the disk image attached as the image cache."""
    project, name = parse(path)
    return {SELECTOR_PREFIX + name: f"{MODE}.{project}"}


def allowlist_name(path: str) -> str:
    """One allowlist per disk image, named from it: runs with the same cache share it, and it never rewrites an
    allowlist the cluster's admin made (Google's examples name theirs gke-secondary-boot-disk-allowlist)."""
    return "raytune-image-cache-" + hashlib.sha256(path.encode()).hexdigest()[:12]


def allowlist(path: str, labels: dict[str, str]) -> dict[str, Any]:
    """The GCPResourceAllowlist that lets Autopilot attach this disk image, and only it."""
    parse(path)
    return {
        "apiVersion": API_VERSION,
        "kind": "GCPResourceAllowlist",
        "metadata": {"name": allowlist_name(path), "labels": labels},
        # A pattern is a regular expression (Google's examples allow projects/PROJECT/global/images/.*): anchored
        # and with its dots escaped, it matches this image's path alone.
        "spec": {"allowedResourcePatterns": ["^" + path.replace(".", r"\.") + "$"]},
    }


def image_label(ref: str) -> str:
    """The label value naming a worker image reference (a reference is longer than a label value may be)."""
    return hashlib.sha256(ref.encode()).hexdigest()[:DIGEST_KEPT]


def disk_image_name(digest: str) -> str:
    """The disk image of one build of the worker image: named from its digest, as the builder refuses a name
    that exists (a rebuild is a new disk image in the same family)."""
    hexdigits = digest.removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", hexdigits):
        raise ValueError(f"{digest!r} is not a sha256 digest")
    return f"raytune-trainer-{hexdigits[:12]}"


def labels_for(ref: str, digest: str) -> dict[str, str]:
    """The labels image/cache.cloudbuild.yaml gives the disk image of `ref` at `digest` (tests hold the two
    together)."""
    return {IMAGE_LABEL: image_label(ref), DIGEST_LABEL: digest.removeprefix("sha256:")[:DIGEST_KEPT]}


def verdict(ref: str, disk: dict[str, Any], digest: str | None) -> tuple[bool, str]:
    """Whether the disk image (Compute Engine's answer) caches the build of `ref` that a run pulls now (`digest`:
    the tag's current one, None when unknown): (in place, what to say)."""
    status = disk.get("status")
    if status != "READY":
        return False, f"status {status}: GKE cannot attach it yet"
    labels = disk.get("labels") or {}
    if labels.get(IMAGE_LABEL) != image_label(ref):
        return False, f"it does not hold {ref} (made for another image, or not by raytune image --cache)"
    kept = str(labels.get(DIGEST_LABEL) or "")
    if digest is None:
        return True, f"READY, holds {ref} at sha256:{kept[:12]} (the tag's current build was not read)"
    if not kept or not digest.removeprefix("sha256:").startswith(kept):
        return False, (
            f"holds an older build of {ref} (sha256:{kept[:12]}; the tag is now {digest[:19]}): new nodes pull the "
            "layers that changed"
        )
    return True, f"READY, holds {ref} at {digest[:19]}, the tag's current build"
