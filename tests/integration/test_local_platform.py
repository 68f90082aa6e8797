"""The local platform's choices that need no Ray process: GPU slices per node, the accelerator it stands
in for, what fits this machine, the auth token, free port ranges."""

from __future__ import annotations

import json
import socket
import stat

import pytest

from functions.core.config import RunConfig
from functions.core.errors import PermanentError
from functions.local import emulators
from functions.local.emulators import Service
from functions.local.platform import LocalRay, NodeShape, auth_token, check_fits


def gpu_config(nodes: int, gpus: int) -> RunConfig:
    return RunConfig.model_validate({"scaling": {"nodes": nodes, "gpus_per_node": gpus, "accelerator": "H100"}})


def test_each_local_node_gets_its_own_gpus_and_stands_in_for_the_accelerator(tmp_path):
    platform = LocalRay(tmp_path, "tag", gpus=4)
    platform.head = Service(proc=None, port=1234)  # type: ignore[arg-type]
    platform.shape = NodeShape(cpus=2, gpus=2, accelerator="H100")
    args0, env0 = platform._node_args(0)
    args1, env1 = platform._node_args(1)
    assert (env0["CUDA_VISIBLE_DEVICES"], env1["CUDA_VISIBLE_DEVICES"]) == ("0,1", "2,3")
    assert "--num-gpus=2" in args0 and "--num-cpus=2" in args0 and "--address=127.0.0.1:1234" in args0
    assert "--num-gpus=2" in args1
    [resources] = [a for a in args0 if a.startswith("--resources=")]
    assert json.loads(resources.removeprefix("--resources=")) == {"accelerator_type:H100": 1}
    platform.shape = NodeShape(cpus=1, gpus=0, accelerator=None)
    args, env = platform._node_args(0)
    assert "--num-gpus=0" in args and not env and not [a for a in args if a.startswith("--resources")]


@pytest.mark.parametrize(
    ("nodes", "gpus", "machine", "hint"),
    [
        (2, 8, 0, "set scaling.gpus_per_node to 0 for a CPU run"),
        (2, 8, 4, "at most 4 for a local run"),
    ],
)
def test_a_gpu_config_must_fit_the_machine(nodes, gpus, machine, hint):
    with pytest.raises(PermanentError) as err:
        check_fits(gpu_config(nodes, gpus), machine)
    assert hint in str(err.value) and f"{nodes} x {gpus} GPUs" in str(err.value)
    check_fits(gpu_config(1, 4), 4)


def test_the_auth_token_is_private_and_kept(tmp_path):
    path = auth_token(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text()) == 64
    assert auth_token(tmp_path).read_text() == path.read_text()


def test_port_ranges_are_free_and_below_the_ephemeral_range():
    low, high = emulators.free_port_range(50)
    assert high - low == 49 and low >= emulators.RANGE_LOW and high < emulators.RANGE_HIGH
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", low))  # free indeed


def test_the_ports_of_a_node_are_distinct_and_avoid_the_taken_ones():
    """Chosen one by one, the kernel can hand out a just-closed port twice (seen on CI: Ray refused a
    node whose node manager and runtime env agent got the same port)."""
    from functions.local import emulators

    for _ in range(20):
        taken = tuple(emulators.free_ports(3))
        ports = emulators.free_ports(6, taken=taken)
        assert len(set(ports)) == 6 and not set(ports) & set(taken)
