"""A workdir's local session, kept in logs/session.json: the tag every process of the session carries and
Ray's temp dir. `raytune logs --local` finds a live job's driver log through it, and the next `raytune local`
of the workdir stops what a killed one left: it holds the workdir lock, so the earlier driver is gone and
anything still carrying its tag is an orphan (a Ray node, fake-gcs-server writing to the bucket's folder).

A run that ended cleanly may leave its Ray head warm (`warm_until`, with the head's pid and ports): the next run of
the workdir attaches to it instead of starting one, and a keeper process (functions/local/keeper.py) stops it once
it has been idle until then. A session without `warm_until` is held by a run, or was left by one that died: the next
run stops everything in it, as before.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from functions.local import emulators
from trainer.codehash import ROOT

FILE = "session.json"
# An idle warm head is not free: its 19 processes (GCS, raylet, the dashboard and its modules, the agents, the log
# monitor) use about 0.05 CPU-seconds a second here (docs/local.md). So a head stays warm long only for a person
# who is iterating: a run that follows the workdir's last one within ITERATING_S (or attached to its warm head);
# after a first run, or one after a pause, only long enough for an immediate rerun.
KEEP_WARM_S = 600.0  # iterating: the next run comes within minutes
FIRST_KEEP_WARM_S = 30.0  # otherwise: an immediate rerun's, about 1.5 CPU-seconds of idling
ITERATING_S = 600.0
ENDED_FILE = "last-run-ended"  # its mtime: when the workdir's last run ended
KEEP_WARM_ENV = "RAYTUNE_LOCAL_KEEP_WARM_S"
KEEPER = "RAYTUNE_LOCAL_KEEPER"  # the keeper's environment names the session it keeps
RAY_TMP_PREFIX = "rt-"  # Ray's socket paths are length-limited: its temp dir is short, directly under /tmp


@dataclass(frozen=True)
class WorkdirSession:
    """What logs/session.json holds of a workdir's processes (one run's, or a warm head's): the tag each carries, Ray's
    temp dir, and the head a next run may attach to."""

    tag: str
    ray_tmp: str
    head_pid: int | None = None  # the head's `ray start` (its session leader), once started
    head_port: int | None = None  # its GCS port
    dashboard_port: int | None = None
    warm_until: float | None = None  # left warm by a clean run until then (seconds since the epoch); None: in use


def keep_warm_default() -> float | None:
    """How long a local cluster stays up after a run that ended on its own (`raytune local`'s and `retry`'s alike)
    when the command does not say: RAYTUNE_LOCAL_KEEP_WARM_S, else None (the iteration rule: `keep_warm_for`)."""
    given = os.environ.get(KEEP_WARM_ENV, "")
    try:
        return max(0.0, float(given)) if given else None
    except ValueError:
        return None


def iterating(workdir: Path, reused: bool, now: float) -> bool:
    """Whether a run starting `now` shows a person iterating: it attached to a warm head, or the workdir's last run
    ended within ITERATING_S."""
    if reused:
        return True
    try:
        ended = (workdir / "logs" / ENDED_FILE).stat().st_mtime
    except OSError:
        return False
    return now - ended <= ITERATING_S


def keep_warm_for(given: float | None, iterated: bool) -> float:
    """The seconds a clean run's head stays warm: as given, else by the iteration rule."""
    if given is not None:
        return given
    return KEEP_WARM_S if iterated else FIRST_KEEP_WARM_S


def run_ended(workdir: Path) -> None:
    """Note that a run of the workdir ended now (the next run's `iterating` reads it)."""
    path = workdir / "logs" / ENDED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def _path(workdir: Path) -> Path:
    return workdir / "logs" / FILE


def new_ray_tmp() -> str:
    return tempfile.mkdtemp(prefix=RAY_TMP_PREFIX, dir="/tmp")


def scratch(ray_tmp: str) -> str:
    """The cluster's processes' temp folder (TMPDIR), inside its Ray folder: removed with it."""
    path = Path(ray_tmp) / "tmp"
    path.mkdir(exist_ok=True)
    return str(path)


def write(workdir: Path, session: WorkdirSession) -> None:
    _path(workdir).parent.mkdir(parents=True, exist_ok=True)
    _path(workdir).write_text(json.dumps(asdict(session)))


def warm(workdir: Path) -> WorkdirSession | None:
    """The session a clean run left warm, if its head still runs (its pid carries the tag, its port answers)."""
    found = read(workdir)
    if found is None or found.warm_until is None or found.head_pid is None or found.head_port is None:
        return None
    if found.head_pid not in emulators.tagged(found.tag) or not emulators.port_open(found.head_port):
        return None
    return found


def keep_warm(workdir: Path, left: WorkdirSession, seconds: float) -> None:
    """Leave the session's head warm for `seconds` of idle time; the keeper stops it then (one per session)."""
    write(workdir, replace(left, warm_until=time.time() + seconds))
    keepers = [pid for pid in emulators.tagged(left.tag, variable=KEEPER) if pid != os.getpid()]
    if keepers:
        return  # the session's keeper reads the new time
    env = {k: v for k, v in os.environ.items() if k != emulators.TAG}  # the sweep it runs must not stop itself
    subprocess.Popen(
        [sys.executable, "-m", "functions.local.keeper", str(workdir), left.tag],
        env={**env, KEEPER: left.tag, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives this raytune local and its terminal
    )


def read(workdir: Path) -> WorkdirSession | None:
    try:
        return WorkdirSession(**json.loads(_path(workdir).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def processes(session: WorkdirSession, sessions: set[int] | None = None) -> list[int]:
    """The session's live processes: those carrying its tag, and those holding a file in its Ray temp dir in a
    process session of theirs (`sessions`: the ids seen so far; the head's, `ray start`'s, from the first)."""
    seen = sessions if sessions is not None else set()
    if session.head_pid is not None:
        seen.add(session.head_pid)
    return emulators.tagged_or_holding(session.tag, Path(session.ray_tmp), seen)


def stop(workdir: Path) -> list[int]:
    """Stop what the workdir's recorded session left running (an earlier run that was killed, or this one
    at its end), remove its Ray temp dir (only a folder this module made: the file is the user's to edit)
    and the record. The caller holds the workdir lock. Returns the pids it stopped."""
    recorded = read(workdir)
    if recorded is None:
        return []
    stopped = stop_processes(recorded)
    _path(workdir).unlink(missing_ok=True)
    return stopped


def stop_processes(recorded: WorkdirSession) -> list[int]:
    """Stop the session's processes and remove its Ray temp dir, whatever became of its workdir (the keeper of a
    warm head whose workdir was deleted stops what it kept this way). Returns the pids it stopped."""
    sessions: set[int] = set()  # kept across kill_all's passes: an orphan keeps its session id
    stopped = emulators.kill_all(lambda: processes(recorded, sessions))
    ray_tmp = Path(recorded.ray_tmp)
    if ray_tmp.parent == Path("/tmp") and ray_tmp.name.startswith(RAY_TMP_PREFIX):
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return stopped
