"""The driver a node runs against the CUDA the image's torch build needs (functions/core/gpu_driver.py), and the
trainer's reading of both on a GPU node (trainer/preflight.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.core import gpu_driver
from functions.core.gpu_support import torch_cuda
from trainer import preflight

ROOT = Path(__file__).resolve().parents[2]
NVRM = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {}  Release Build  (builder@host)  Tue Jun 10 2025\n"
    "GCC version:  gcc version 12.2.0 (GCC)\n"
)


@pytest.mark.parametrize(
    ("driver", "cuda", "runs"),
    [
        ("570.133.20", (13, 0), False),  # COS `latest` for B200 at some GKE versions, against a CUDA 13 torch
        ("580.65.06", (13, 0), True),
        ("580.82.07", (13, 0), True),
        ("535.230.02", (12, 8), True),  # CUDA 12.x minor version compatibility: R525 and later
        ("525.60.12", (12, 6), False),
    ],
)
def test_a_driver_runs_a_cuda_build_from_its_majors_oldest_driver_on(driver, cuda, runs):
    found = gpu_driver.problem(cuda, gpu_driver.version(NVRM.format(driver)))
    assert (found is None) == runs
    if not runs:
        assert driver in found and f"CUDA {cuda[0]}.{cuda[1]}" in found


def test_an_unknown_driver_or_cuda_is_not_a_problem_said_on_a_guess():
    assert gpu_driver.version("no driver here") is None
    assert gpu_driver.problem((13, 0), None) is None and gpu_driver.problem(None, (570, 1)) is None


def test_the_image_pins_a_cuda_whose_oldest_driver_is_known():
    packages = json.loads((ROOT / "image" / "resolved.json").read_text())["packages"]
    cuda = torch_cuda(packages)
    assert cuda is not None and cuda[0] in gpu_driver.MIN_DRIVER, cuda


def test_the_preflight_reads_the_nodes_driver_and_the_images_cuda(tmp_path):
    version_file = tmp_path / "version"
    version_file.write_text(NVRM.format("570.133.20"))
    text, packages = preflight.node_driver(str(version_file))
    assert "570.133.20" in text and "torch" in packages
    cuda13 = {"torch": "2.13.0", "cuda-toolkit": "13.0.3.0"}
    assert "older than 580.65.06" in preflight.driver_problem(text, cuda13)
    assert preflight.driver_problem("", cuda13) is None  # no driver file (a CPU node): nothing to judge
