"""The preflight against the real huggingface_hub client with no Hub to answer (a closed port): a model that is
not cached here fails the run at once, one line, instead of after every worker restart; a cached one goes ahead."""

from __future__ import annotations

import socket

import pytest

from functions.core.config import DatasetSpec, ModelSpec
from trainer import preflight


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connections are refused
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "hub"


def test_an_unreachable_hub_and_no_cached_copy_fail_fast(no_hub):
    with pytest.raises(preflight.PreflightError, match=r"the Hugging Face Hub did not answer .* not in the cache"):
        preflight.check(ModelSpec(id="google/gemma-3-4b-it"), DatasetSpec(id="tiny://products"))


def test_a_cached_model_goes_ahead_without_the_hub(no_hub, caplog):
    repo = no_hub / "models--google--gemma-3-4b-it"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    (repo / "snapshots" / "0123abcd" / "config.json").write_text("{}")
    preflight.check(ModelSpec(id="google/gemma-3-4b-it"), DatasetSpec(id="tiny://products"))
    assert "using the cached copy" in caplog.text


GPU_CHECK = """
import sys
import ray
from functions.core.config import ScalingSpec
from trainer import preflight

# One GPU of a B200 node, as Ray sees a node of the run's group (no GPU needed: Ray only counts them).
ray.init(num_cpus=1, num_gpus=1, resources={"accelerator_type:B200": 1}, include_dashboard=False)
preflight.DRIVER_VERSION_FILE = sys.argv[1]
reading = preflight.gpu_driver_check(ScalingSpec(nodes=1, gpus_per_node=8, accelerator="B200"), sys.argv[2])
print("READ", reading.model_dump_json(), flush=True)
"""


@pytest.mark.slow
def test_the_gpu_check_runs_on_a_gpu_of_the_runs_accelerator_and_keeps_its_reading(tmp_path):
    """The task asks Ray for one GPU of the run's accelerator and reads the node it lands on; the reading, with the
    node's name from the downward API's variable, is kept in the run folder for `raytune doctor`."""
    import json
    import subprocess
    import sys

    from functions.core.result import GpuDriverSeen
    from tests.trainer.jobs import ROOT, end_private_ray, private_ray_env

    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Fri Aug 15 2025\n")
    folder = tmp_path / "checkpoints" / "run-1"
    ray_tmp, env = private_ray_env()
    env |= {"RAYTUNE_NODE_NAME": "gke-a4-node-7", "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", GPU_CHECK, str(version), str(folder)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        end_private_ray(proc, ray_tmp)
    assert proc.returncode == 0, err[-3000:]
    kept = GpuDriverSeen.model_validate(json.loads((folder / "gpu-driver.json").read_text()))
    assert (kept.node, kept.driver) == ("gke-a4-node-7", "580.82.07") and kept.problem is None
    assert f"READ {kept.model_dump_json()}" in out
