"""Killing a test run leaves nothing behind: a run killed by `timeout` under load left the contract tier's etcd,
kube-apiserver, kube-controller-manager and KubeRay operator running for an hour (issue 56). The servers a run
starts (the control plane's, the emulators) are killed by the kernel when what started them ends, however it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_local_platform import alive

ROOT = Path(__file__).resolve().parents[2]

STARTER = """
import sys, threading, time
from pathlib import Path
from functions.local import emulators

def start():
    service = emulators.start(["sleep", "600"], 0, Path(sys.argv[1]), ready=lambda: True, dies_with_starter=True)
    print(service.proc.pid, flush=True)
    time.sleep(600)  # holds, as tests/realkube/session.py's starter thread does until the run ends

threading.Thread(target=start, daemon=True).start()
time.sleep(600)
"""


def test_a_server_dies_with_the_run_that_started_it_even_killed_outright(tmp_path):
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    assert starter.stdout is not None
    server = int(starter.stdout.readline())
    assert alive(server)
    os.kill(starter.pid, signal.SIGKILL)  # as `timeout -s KILL` ends a test run: no clean-up runs
    starter.wait()
    deadline = time.monotonic() + 10
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(server), "the server outlived the run that started it"


FORK_HANDLERS = """
import os, sys
from pathlib import Path
from functions.local import emulators

marker = Path(sys.argv[1])
os.register_at_fork(after_in_child=lambda: marker.touch())
service = emulators.start(["sleep", "600"], 0, marker.with_suffix(".log"), ready=lambda: True, dies_with_starter=True)
service.stop(grace_s=1)
print(marker.exists())
"""


def test_a_server_is_started_without_running_the_starters_fork_handlers(tmp_path):
    """A server that dies with its starter is started without fork() and its handlers: gRPC's, in a test process
    that has used a Pub/Sub client, restart its poller in the child, which close_fds then leaves polling a closed
    fd, and the child aborts before exec (SIGABRT, seen in CI). The starter's handler here says whether any ran."""
    said = subprocess.run(
        [sys.executable, "-c", FORK_HANDLERS, str(tmp_path / "forked")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == "False", "a fork handler ran in the server's child"


INTERRUPTED = """
import os, time
from pathlib import Path
from functions.core.config import RunConfig
from tests.harness import tiny_checkpointed
from tests.trainer.jobs import start_job

def test_interrupted(tmp_path):
    config = tiny_checkpointed("interrupted", samples=8, eval_fraction=0, max_steps=10000, storage_path=str(tmp_path))
    job = start_job(RunConfig.model_validate(config), "interrupted", tmp_path / "job.log")
    time.sleep(5)  # its private Ray starting
    assert job.poll() is None, (tmp_path / "job.log").read_text()
    written = Path(os.environ["JOB_PID"] + ".part")
    written.write_text(str(job.pid))
    written.rename(os.environ["JOB_PID"])  # whole, or not there
    time.sleep(600)  # interrupted here, before the test's own finish()
"""

# The inner test run as a terminal starts it: Ctrl-C handled by Python's default handler, and not blocked. A child
# inherits an ignored or blocked SIGINT from this test's worker process (something earlier in a worker's life can
# leave it so: CI once saw the inner run sleep its full 600 s through the SIGINT), and a user's terminal has neither.
AS_A_TERMINAL = (
    "import signal, sys, pytest; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def test_ctrl_c_on_a_test_run_ends_the_jobs_its_tests_started(tmp_path):
    """A trainer job runs in a session of its own, which Ctrl-C on the test run never reaches: the run ends it."""
    (tmp_path / "test_interrupted.py").write_text(INTERRUPTED)
    pid_file = tmp_path / "job.pid"
    run = subprocess.Popen(
        [sys.executable, "-c", AS_A_TERMINAL, "-q", "-p", "no:cacheprovider", "test_interrupted.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "JOB_PID": str(pid_file)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job = None
    try:
        deadline = time.monotonic() + 90
        while not pid_file.exists() and time.monotonic() < deadline:
            assert run.poll() is None, "the inner test run ended before its job was running"
            time.sleep(0.1)
        job = int(pid_file.read_text())
        assert alive(job)
        run.send_signal(signal.SIGINT)  # what Ctrl-C sends the test run (the job's session never gets it)
        run.wait(timeout=60)
        deadline = time.monotonic() + 10
        while alive(job) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(job), "the job outlived the interrupted test run"
    finally:  # this test's failure leaves nothing either: the inner run, the job and its private Ray
        run.kill()
        if job is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job, signal.SIGKILL)
