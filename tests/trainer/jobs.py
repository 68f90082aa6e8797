"""The RayJob entrypoint (python -m trainer.train) as KubeRay runs it, on a private local Ray instance."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from functions.core.config import RunConfig
from functions.local.cluster import TRAIN_HEALTH_CHECK_INTERVAL_S, auth_token
from trainer.codehash import code_files, code_sha256

ROOT = Path(__file__).resolve().parents[2]


def private_ray_env() -> tuple[str, dict[str, str]]:
    """A new folder for a private local Ray instance (one a process started with the environment makes with
    ray.init()), and that environment: the instance's sockets, scratch and token all in the folder."""
    ray_tmp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths are length-limited
    return ray_tmp, {
        **os.environ,
        "RAY_TMPDIR": ray_tmp,
        "TMPDIR": ray_tmp,  # the workers' scratch (checkpoints, the tiny model, DataLoader sockets) goes with it
        # Ray turns token auth on for a new ray.init() cluster and saves the token to ~/.ray/auth_token: the
        # instance's own token, in its own folder, as the local cluster's, so the tests write nothing to HOME.
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(auth_token(Path(ray_tmp))),
    }


# Jobs started and not yet ended. A job runs in a session of its own (so that it and its private Ray can be killed
# as one group), which Ctrl-C on the test run never reaches: one a test left when it was interrupted went on
# training into its folder, and a later job of the same run met its checkpoints. Whatever ends this process ends
# them too.
_LIVE: dict[int, tuple[subprocess.Popen, str]] = {}


@atexit.register
def _end_all() -> None:
    for proc, ray_tmp in list(_LIVE.values()):
        end_private_ray(proc, ray_tmp)


def end_private_ray(proc: subprocess.Popen, ray_tmp: str) -> None:
    """What of the private instance outlived its driver goes first (its processes share the driver's process
    group, started with start_new_session): its dashboard went on writing into the folder after it was removed,
    leaving an rt-* in /tmp."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    _LIVE.pop(proc.pid, None)


def start_job(cfg: RunConfig, run_id: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The RayJob entrypoint as KubeRay runs it, on a private local Ray instance."""
    ray_tmp, private = private_ray_env()
    env = {
        **private,
        "RAYTUNE_CODE_SHA256": code_sha256(code_files()),
        "PYTHONPATH": str(ROOT),
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": TRAIN_HEALTH_CHECK_INTERVAL_S,  # as on the local cluster
        **(env or {}),
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.train", "--run-id", run_id, "--config-json", cfg.model_dump_json()],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.ray_tmp = ray_tmp
    _LIVE[proc.pid] = (proc, ray_tmp)
    return proc


def finish(proc: subprocess.Popen, log: Path, timeout: float = 480) -> None:
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        end_private_ray(proc, proc.ray_tmp)
    assert rc == 0, log.read_text()[-6000:]
