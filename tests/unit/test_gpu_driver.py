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


def test_the_preflight_reads_the_nodes_driver_and_the_images_cuda(tmp_path, monkeypatch):
    version_file = tmp_path / "version"
    version_file.write_text(NVRM.format("570.133.20"))
    monkeypatch.setenv("RAYTUNE_NODE_NAME", "gke-a4-node-1")  # the downward API's spec.nodeName
    text, packages, node = preflight.node_driver(str(version_file))
    assert "570.133.20" in text and "torch" in packages and node == "gke-a4-node-1"
    cuda13 = {"torch": "2.13.0", "cuda-toolkit": "13.0.3.0"}
    reading = preflight.driver_reading(text, cuda13, node)
    assert (reading.node, reading.driver, reading.cuda) == ("gke-a4-node-1", "570.133.20", "13.0")
    assert "older than 580.65.06" in (reading.problem or "")
    assert preflight.driver_reading("", cuda13, node).problem is None  # no driver file (a CPU node): nothing to judge
    assert preflight.driver_reading(NVRM.format("580.82.07"), cuda13, node).problem is None


def test_every_ray_container_knows_its_node():
    """The reading names the node through the downward API, in the head's and every worker's container."""
    from functions.core import manifests
    from functions.core.config import RunConfig

    objects = manifests.assemble(RunConfig(), "run-1", {"trainer/__init__.py": b""}, "0" * 64)
    spec = objects.cluster["spec"]
    pods = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    for pod in pods:
        for container in pod["spec"]["containers"]:
            [env] = [e for e in container["env"] if e["name"] == "RAYTUNE_NODE_NAME"]
            assert env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
