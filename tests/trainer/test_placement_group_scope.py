"""What trainer/ray_trainer.py relies on to leave the placement-group cleaner out of a run that is not a sweep's
trial, held on the pinned Ray: a placement group made by an actor of a job's driver (as Ray Train's controller
makes the workers') outlives that actor while the driver lives, and goes with the job when the driver ends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.trainer.jobs import end_private_ray, private_ray_env

pytestmark = pytest.mark.slow

DRIVER = """
import sys, time
import ray
from ray.util.placement_group import placement_group

ray.init(address=sys.argv[1])

@ray.remote(num_cpus=0)
class Controller:
    def place(self):
        group = placement_group([{"CPU": 1}])
        ray.get(group.ready())

controller = Controller.remote()
ray.get(controller.place.remote())
ray.kill(controller)  # the controller dies without removing its group
time.sleep(1)
print("held after the controller died:", ray.available_resources().get("CPU", 0) == 0, flush=True)
"""

CLUSTER = """
import subprocess, sys, time
import ray

context = ray.init(num_cpus=1, include_dashboard=False)
held = subprocess.run([sys.executable, "-c", sys.argv[1], context.address_info["gcs_address"]],
                      capture_output=True, text=True, timeout=120)
print(held.stdout.strip() or held.stderr[-2000:], flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline and ray.available_resources().get("CPU", 0) < 1:
    time.sleep(0.2)
print("freed after the driver ended:", ray.available_resources().get("CPU", 0) == 1, flush=True)
"""


def test_a_dead_controllers_placement_group_holds_its_cpus_until_the_driver_ends():
    ray_tmp, env = private_ray_env()
    cluster = subprocess.Popen(
        [sys.executable, "-c", CLUSTER, DRIVER],
        env={**env, "RAY_USAGE_STATS_ENABLED": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the private Ray's processes share its group: all of them go at the end
    )
    try:
        out, err = cluster.communicate(timeout=240)
    finally:
        end_private_ray(cluster, ray_tmp)
    assert "held after the controller died: True" in out, out + err[-3000:]
    assert "freed after the driver ended: True" in out, out + err[-3000:]
