"""Whether a node's NVIDIA driver runs the CUDA a torch build was made with: the trainer checks it on a GPU node
before any worker starts (trainer/preflight.py), so a driver too old for the image fails the run at once, naming
both, instead of failing at CUDA's start in every worker and being retried.

Facts, with their sources (read 2026-12-06):
- A CUDA 12.x build runs on any R525 driver from 525.60.13 on, a CUDA 13.x build on R580 from 580.65.06 on (CUDA's
  minor version compatibility within a major: NVIDIA's "CUDA Compatibility" guide, "Minor Version
  Compatibility", and the CUDA Toolkit Release Notes' Table 3, "CUDA Toolkit and Corresponding Driver Versions":
  CUDA 13.0 GA >= 580.65.06, 12.0 GA >= 525.60.13). Below it CUDA's initialisation fails ("CUDA driver version is
  insufficient for CUDA runtime version").
- GKE installs the driver its node version pairs with `cloud.google.com/gke-gpu-driver-version` (default or latest;
  GKE's "Install NVIDIA GPU drivers" page). COS's `latest` for B200 was 570.133.20 at some versions (COS's
  gpu_driver_versions release note), below what a CUDA 13 build needs: the check below catches such a node.
- A node's driver version: /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
  580.82.07 ..."), which the GPU device plugin mounts into GPU containers along with the driver's libraries.
"""

from __future__ import annotations

import re

MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}  # CUDA major -> oldest Linux driver that runs its builds
_NVRM = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+)\.(\d+)(?:\.(\d+))?")


def version(text: str) -> tuple[int, ...] | None:
    """The driver version in /proc/driver/nvidia/version's text (or a bare "580.82.07"); None when there is none."""
    hit = _NVRM.search(text) or re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*", text)
    return tuple(int(part) for part in hit.groups() if part is not None) if hit else None


def problem(cuda: tuple[int, int] | None, driver: tuple[int, ...] | None) -> str | None:
    """Why this driver cannot run a build of this CUDA; None when it can (or either is not known)."""
    if cuda is None or driver is None:
        return None
    want = MIN_DRIVER.get(cuda[0])
    if want is None or driver >= (version(want) or ()):
        return None
    have = shown(driver)
    return (
        f"the node's NVIDIA driver {have} is older than {want}, the oldest that runs the image's CUDA "
        f"{cuda[0]}.{cuda[1]} torch build: pin a GKE version whose GPU driver is {want} or newer "
        f"(cloud.google.com/gke-gpu-driver-version: latest), or build the image with a torch for an older CUDA"
    )


def shown(driver: tuple[int, ...]) -> str:
    """A driver version as NVIDIA writes it: 580.82.07 (the minor and patch two digits)."""
    return ".".join(f"{part:02d}" if n else str(part) for n, part in enumerate(driver))
