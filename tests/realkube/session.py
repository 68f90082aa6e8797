"""One real control plane for the whole test run, not one per xdist worker: the process that runs the session
(xdist's controller, or pytest alone) starts it in a background thread as the run begins, when the run selects
the tier; every process that runs one of the tier's tests attaches to it (tests/contract/conftest.py); the
starter stops it when the run ends. Whatever stopped it starting (a command's stderr, a process's log) is what
those tests fail with."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from tests.realkube.control_plane import ControlPlane, binaries

NO_CAPACITY = "cloud.google.com/reservation-name"  # the node player's Autopilot has none for a reservation
KUBELET_ARGS = ("--no-capacity-for", NO_CAPACITY)  # how the tier's node player is started
INFO = "RAYTUNE_REALKUBE_INFO"  # the file where the starter writes the plane's info, or why it did not start
TIER = Path(__file__).resolve().parents[1] / "contract"


def selected(args: list[str], markexpr: str) -> bool:
    """Whether a run of these paths (none: the testpaths) may run a test of the tier."""
    if markexpr.strip() == "unit":
        return False
    paths = [Path(a.split("::")[0]).resolve() for a in args if not a.startswith("-")]
    return not paths or any(p == TIER or TIER in p.parents or p in TIER.parents for p in paths)


class Starter:
    """Starts the control plane in the background; `stop` waits for it and stops it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.dir = Path(tempfile.mkdtemp(prefix="rk-run-"))
        self.file = self.dir / "plane.json"
        self.plane: ControlPlane | None = None
        self.started = time.monotonic()
        self.ready = threading.Event()
        self.ended = threading.Event()
        # The plane's processes die with this thread (PR_SET_PDEATHSIG): it lives until the run ends, so a test run
        # killed outright (a timeout's SIGKILL) takes them with it instead of leaving them running.
        self.thread = threading.Thread(target=self._start_and_hold, name="realkube-start", daemon=True)
        self.thread.start()

    def _start_and_hold(self) -> None:
        try:
            self.plane = ControlPlane(self.folder)
            self.plane.start(kubelet_args=KUBELET_ARGS)
            said = {"plane": self.plane.info(), "seconds": round(time.monotonic() - self.started, 1)}
        except Exception as exc:
            said = {"error": f"{type(exc).__name__}: {exc}"}
        partial = self.file.with_suffix(".tmp")
        partial.write_text(json.dumps(said))
        partial.rename(self.file)  # readers see the whole file or none
        self.ready.set()
        self.ended.wait()
        if self.plane is not None:
            self.plane.stop()

    def stop(self) -> None:
        self.ready.wait(timeout=300)
        self.ended.set()
        self.thread.join(timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


def start(args: list[str], markexpr: str) -> Starter | None:
    """In the process that runs the session: start the plane when the run selects the tier and the binaries are
    there, and tell the worker processes (they inherit the environment) where to find it."""
    folder = binaries()
    if folder is None or not selected(args, markexpr):
        return None
    starter = Starter(folder)
    os.environ[INFO] = str(starter.file)
    return starter


def attach(timeout_s: float = 300) -> ControlPlane:
    """The run's control plane, once started (raises with why it did not start)."""
    path = os.environ.get(INFO)
    if not path:
        raise RuntimeError(f"{INFO} is not set: the control plane was not started for this run")
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the control plane did not start within {timeout_s}s")
        time.sleep(0.25)
    said = json.loads(Path(path).read_text())
    if "error" in said:
        raise RuntimeError(f"the real control plane did not start: {said['error']}")
    return ControlPlane.attach(said["plane"])
