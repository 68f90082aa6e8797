"""A real MLflow tracking server for the tests: the `mlflow` package's own `mlflow server`, on a free port, with a
SQLite store and an artifact folder of its own, started as the emulators are (its own process group, killed with
the test run however it ends)."""

from __future__ import annotations

import contextlib
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from functions.local import emulators

MLFLOW = str(Path(sys.executable).parent / "mlflow")
START_S = 120  # its first start makes the SQLite schema (alembic): 5-10 s here, more on a busy machine


def healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def start(folder: Path) -> tuple[emulators.Service, str]:
    folder.mkdir(parents=True, exist_ok=True)
    port = emulators.free_port()
    uri = f"http://127.0.0.1:{port}"
    args = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"]
    args += ["--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--workers", "1"]
    service = emulators.start(
        args, port, folder / "server.log", timeout_s=START_S, ready=lambda: healthy(uri), dies_with_starter=True
    )
    return service, uri


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    """The server's URI while it runs."""
    service, uri = start(folder)
    try:
        yield uri
    finally:
        service.stop()
