"""The local platform's choices that need no Ray process: GPU slices per node, the accelerator it stands
in for, what fits this machine, the auth token, free port ranges, what the Jobs API's errors mean, and the
clean-up of what a killed run left in its workdir."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from functions.core.config import RunConfig
from functions.core.errors import NotFound, PermanentError, TransientError
from functions.core.platform import AttemptSpan
from functions.local import emulators, session
from functions.local.cluster import LocalCluster, auth_token
from functions.local.emulators import Service
from functions.local.nodes import NodeShape
from functions.local.platform import LocalRay, check_fits, jobs_api, live_driver_log


def gpu_config(nodes: int, gpus: int) -> RunConfig:
    return RunConfig.model_validate({"scaling": {"nodes": nodes, "gpus_per_node": gpus, "accelerator": "H100"}})


def test_a_groups_node_has_its_nodes_resources_and_gpus_and_stands_in_for_the_accelerator(tmp_path):
    # Built without I/O: nothing is started, written or read until it is asked to start a node.
    head = Service(proc=None, port=1234)  # type: ignore[arg-type]
    cluster = LocalCluster(tmp_path, "tag", str(tmp_path / "ray"), {}, head=head)
    cluster.shapes["run-a"] = NodeShape(cpus=2, gpus=2, accelerator="H100")
    args, env = cluster.node_args("run-a", (0, 1))  # the local node of a group of 2 nodes x 2 GPUs
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "--num-gpus=4" in args and "--num-cpus=4" in args and "--address=127.0.0.1:1234" in args
    [resources] = [a for a in args if a.startswith("--resources=")]
    # the run's own resource, one unit per training worker (as its group's two pods on GKE have together)
    assert json.loads(resources.removeprefix("--resources=")) == {"run-a": 4, "accelerator_type:H100": 1}
    _, env = cluster.node_args("run-a", (1, 3))  # the slices it was given, wherever they lie
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3,6,7"
    cluster.shapes["run-b"] = NodeShape(cpus=1, gpus=0, accelerator=None)
    args, env = cluster.node_args("run-b", (0, 1, 2))
    [resources] = [a for a in args if a.startswith("--resources=")]
    assert "--num-gpus=0" in args and "--num-cpus=3" in args and not env
    assert json.loads(resources.removeprefix("--resources=")) == {"run-b": 3}
    assert not list(tmp_path.iterdir())


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
    path.chmod(0o644)  # as an earlier release, or a copy by hand, left it
    assert auth_token(tmp_path).read_text() == path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


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
        # never where the kernel hands out ports to outgoing connections (CI: Ray's client server lost its port)
        assert all(emulators.RANGE_LOW <= p < emulators.RANGE_HIGH for p in (*taken, *ports))
        low, high = emulators.free_port_range(100, taken=taken)
        assert not set(range(low, high + 1)) & set(taken)


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (requests.ConnectionError("Connection reset by peer"), TransientError),
        (requests.ReadTimeout("read timed out"), TransientError),
        (RuntimeError("Request failed with status code 503: busy."), TransientError),
        (RuntimeError("Request failed with status code 500: Internal Server Error."), TransientError),
        (RuntimeError("Request failed with status code 404: Job r-1 does not exist."), NotFound),
        (RuntimeError("Request failed with status code 400: bad entrypoint."), PermanentError),
        (RuntimeError("something else went wrong"), RuntimeError),
    ],
)
def test_the_jobs_api_errors_mean_what_their_status_says(raised, expected):
    """A busy dashboard is retried on the next tick; a missing job is absent; anything else is reported."""
    with pytest.raises(expected) as err, jobs_api("status of r-1"):
        raise raised
    assert str(raised) in str(err.value)


def tagged_tree(tag: str, holding: str) -> subprocess.Popen:
    """`ray start` in a session of its own, carrying the tag: it forks a worker (which inherits the tag) and an agent
    without the tag that writes a log in the session's Ray folder (a Ray agent, whose process title overwrote its
    environment), both in its process session, as a raylet's children are."""
    agent = f"import time; log = open({holding!r}, 'w'); time.sleep(600)"
    child = (
        "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"env = {{k: v for k, v in os.environ.items() if k != {emulators.TAG!r}}}; "
        f"subprocess.Popen([sys.executable, '-c', {agent!r}], env=env); time.sleep(600)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", child], env={**os.environ, emulators.TAG: tag}, start_new_session=True
    )


def bystander(path: str) -> subprocess.Popen:
    """A process raytune did not start, holding a file in the session's Ray folder (a user's `tail -f` of a Ray log,
    an editor), in a session of its own."""
    code = f"import time; log = open({path!r}); time.sleep(600)"
    env = {k: v for k, v in os.environ.items() if k != emulators.TAG}
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_what_a_killed_session_left_is_stopped_and_removed(tmp_path):
    tag = "killed-" + os.urandom(4).hex()
    ray_tmp = session.new_ray_tmp()
    recorded = session.WorkdirSession(tag, ray_tmp)
    parent = tagged_tree(tag, f"{ray_tmp}/dashboard_agent.log")
    emulators.wait_until(lambda: len(session.processes(recorded)) == 3, "the session's processes up", 30)
    reader = bystander(f"{ray_tmp}/dashboard_agent.log")
    emulators.wait_until(lambda: reader.pid in emulators.holding(Path(ray_tmp)), "the bystander reads", 30)
    session.write(tmp_path, recorded)
    stopped = session.stop(tmp_path)
    parent.wait(timeout=10)
    emulators.wait_until(lambda: not session.processes(recorded), "nothing of the session left", 10)
    assert len(stopped) == 3 and not os.path.exists(ray_tmp) and session.read(tmp_path) is None
    assert reader.poll() is None, "a process raytune did not start is never stopped"
    reader.kill()
    reader.wait()
    assert session.stop(tmp_path) == []  # nothing recorded: nothing to do


def test_a_session_file_never_makes_it_remove_a_folder_it_did_not_make(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    session.write(tmp_path, session.WorkdirSession("gone-" + os.urandom(4).hex(), str(precious)))
    assert session.stop(tmp_path) == [] and precious.is_dir()


def test_a_driver_log_is_found_in_any_ray_session_of_the_workdir(tmp_path):
    """After an idle teardown a new head starts a new Ray session; the earlier job's log is still found."""
    ray_tmp = tmp_path / "ray"
    session.write(tmp_path, session.WorkdirSession("t", str(ray_tmp)))
    assert live_driver_log(tmp_path, "r-1") is None
    old = ray_tmp / "session_2026-12-01_02-00-00_000000_1" / "logs" / "job-driver-r-1.log"
    new = ray_tmp / "session_2026-12-01_03-00-00_000000_2" / "logs" / "job-driver-r-2.log"
    for path in (old, new):
        path.parent.mkdir(parents=True)
        path.write_text(path.name)
        time.sleep(0.01)
    assert live_driver_log(tmp_path, "r-1") == old and live_driver_log(tmp_path, "r-2") == new


def alive_resources(platform: LocalRay) -> list[dict]:
    """Ray's own view of the live nodes' resources, from a driver of that cluster (its token, its address only)."""
    probe = (
        f"import json, ray; ray.init(address='127.0.0.1:{platform.cluster.head.port}', log_to_driver=False); "
        "print(json.dumps([n['Resources'] for n in ray.nodes() if n['Alive']]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **platform.cluster.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


FLAKY_RAY = """#!/bin/sh
# fails its first `start` as ray does on a machine too busy for the GCS, leaving a child behind
n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.count"
if [ "$n" -lt "$FAILURES" ]; then
  sleep 300 & echo $! >> "$0.orphans"
  echo "Exception: The current node timed out during startup."
  exit 1
fi
echo "Ray runtime started."
exec sleep 300
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("failures", [1, 3])
def test_a_node_that_misses_its_start_is_started_again_and_leaves_nothing(tmp_path, caplog, failures):
    ray = tmp_path / "ray"
    ray.write_text(FLAKY_RAY)
    ray.chmod(0o755)
    platform = LocalRay.claimed(tmp_path / "work", "tag", gpus=0)
    platform.cluster.ray = str(ray)
    platform.cluster.env["FAILURES"] = str(failures)
    try:
        if failures < 3:
            node = platform.cluster._ray_start([], {}, 0, "ray-worker-x")
            assert node.proc.poll() is None and "starting it again" in caplog.text
            node.stop(grace_s=1)
        else:
            # transient: the submission is tried again on the next tick, the run does not fail
            with pytest.raises(TransientError, match=r"ray-worker-x did not start \(Exception: The current node timed"):
                platform.cluster._ray_start([], {}, 0, "ray-worker-x")
        assert int((tmp_path / "ray.count").read_text()) == min(failures + 1, 3)
        orphans = [int(pid) for pid in (tmp_path / "ray.orphans").read_text().split()]
        time.sleep(0.2)
        assert len(orphans) == failures and not [pid for pid in orphans if alive(pid)]  # none would register later
    finally:
        platform.shutdown()


HANGING_RAY = """#!/bin/sh
# its first `start` never says it is up (a machine so busy the node neither registers nor gives up)
n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.count"
if [ "$n" -lt 1 ]; then exec sleep 300; fi
echo "Ray runtime started."
exec sleep 300
"""


def test_a_node_start_that_times_out_is_started_again_not_a_permanent_failure(tmp_path, monkeypatch, caplog):
    from functions.local import nodes

    monkeypatch.setattr(nodes, "START_TIMEOUT_S", 1.0)
    ray = tmp_path / "ray"
    ray.write_text(HANGING_RAY)
    ray.chmod(0o755)
    platform = LocalRay.claimed(tmp_path / "work", "tag", gpus=0)
    platform.cluster.ray = str(ray)
    try:
        node = platform.cluster._ray_start([], {}, 0, "ray-worker-x")
        assert node.proc.poll() is None and "ray-worker-x did not start" in caplog.text
        assert int((tmp_path / "ray.count").read_text()) == 2
        node.stop(grace_s=1)
    finally:
        platform.shutdown()


def test_each_worker_group_is_one_ray_node_with_its_nodes_resources_and_is_released_alone(tmp_path):
    """Real `ray start`s: a group of 2 nodes is one local Ray node with 2 units of the group's resource (one
    per training worker) and both nodes' CPUs; a second group gets a node of its own (each in a Ray folder of
    its own: in one folder a second node takes the first's socket name and never registers); scaling a group to
    0 (its run ended) stops exactly its node: the other's keeps running (the same process), and Ray sees only the
    live run's resource; a dead node counts as none of its group's nodes and is replaced at the next sizing."""
    import uuid

    from functions.core.allocation import group_name

    platform = LocalRay.claimed(tmp_path, uuid.uuid4().hex, gpus=0)
    two = RunConfig.model_validate({"scaling": {"nodes": 2, "gpus_per_node": 0}})
    one = RunConfig.model_validate({"scaling": {"nodes": 1, "gpus_per_node": 0}})
    a, b = group_name("run-a"), group_name("run-b")
    try:
        platform.ensure_cluster(two)
        assert platform.size(two, "run-a", None, {a: 2}, 1)
        assert platform.size(one, "run-b", platform.workers(two.cluster), {a: 2, b: 1}, 2)
        assert platform.node_count == 3 and platform.workers(two.cluster).groups == {a: 2, b: 1}
        alive = alive_resources(platform)
        [of_a] = [r for r in alive if a in r]
        [of_b] = [r for r in alive if b in r]
        assert (of_a[a], of_a["CPU"], of_b[b], of_b["CPU"]) == (2, 2, 1, 1), alive
        # run-a ends: exactly its node stops, run-b's keeps running, and Ray counts run-b's resource only
        ended, kept = platform.cluster.groups[a].service, platform.cluster.groups[b].service
        assert platform.scale(two.cluster, platform.workers(two.cluster), {a: 0, b: 1}, 3)
        assert ended.proc.poll() is not None and kept.proc.poll() is None, "only the ended run's node stopped"
        assert platform.workers(two.cluster).drained == frozenset({a})
        alive = alive_resources(platform)
        assert any(b in r for r in alive) and not any(a in r for r in alive), alive
        # run-a's next attempt: its node back, then lost
        assert platform.size(two, "run-a", platform.workers(two.cluster), {a: 2, b: 1}, 4)
        first = platform.cluster.groups[a].service
        first.stop(grace_s=0)  # lost, as a preempted node
        assert platform.workers(two.cluster).groups == {a: 0, b: 1}
        assert "exited with" in platform.disruptions(two, "run-a", AttemptSpan())[0]
        assert platform.size(two, "run-a", platform.workers(two.cluster), {a: 2, b: 1}, 5)
        second = platform.cluster.groups[a].service
        assert second is not first and second.name != first.name and platform.workers(two.cluster).groups[a] == 2
        assert any("exited with" in line for line in platform.disruptions(two, "run-a", AttemptSpan()))  # remembered
        assert platform.scale(two.cluster, platform.workers(two.cluster), {a: 0, b: 1}, 6)
        assert (
            second.proc.poll() is not None and platform.cluster.groups[b].service is kept and kept.proc.poll() is None
        )
        assert platform.workers(two.cluster).drained == frozenset({a})
    finally:
        platform.shutdown()


def test_a_warm_heads_keeper_stops_it_when_its_workdir_is_deleted(tmp_path):
    """A user tries the quickstart and removes the folder: the keeper of the head left warm finds no session file and
    stops the processes it keeps by their tag (issue 68), instead of taking the missing file for "stopped"."""
    tag = "warm-" + os.urandom(4).hex()
    ray_tmp = session.new_ray_tmp()
    workdir = tmp_path / "clone" / ".raytune" / "local"
    parent = tagged_tree(tag, f"{ray_tmp}/dashboard_agent.log")
    emulators.wait_until(lambda: len(session.processes(session.WorkdirSession(tag, ray_tmp))) == 3, "the head up", 30)
    session.write(workdir, session.WorkdirSession(tag, ray_tmp, head_pid=parent.pid, warm_until=time.time() + 600))
    env = {k: v for k, v in os.environ.items() if k != emulators.TAG}
    keeper = subprocess.Popen(
        [sys.executable, "-m", "functions.local.keeper", str(workdir), tag],
        env={**env, session.KEEPER: tag},
        cwd=session.ROOT,
    )
    time.sleep(1)
    assert keeper.poll() is None, "it keeps the warm head"
    shutil.rmtree(tmp_path / "clone")
    assert keeper.wait(timeout=30) == 0
    parent.wait(timeout=10)
    emulators.wait_until(lambda: not emulators.tagged(tag), "nothing of the session left", 10)
    assert not os.path.exists(ray_tmp)
