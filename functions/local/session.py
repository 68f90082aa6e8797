"""A workdir's local session, kept in logs/session.json: the tag every process of the session carries and
Ray's temp dir. `raytune logs --local` finds a live job's driver log through it, and the next `raytune local`
of the workdir stops what a killed one left: it holds the workdir lock, so the earlier driver is gone and
anything still carrying its tag is an orphan (a Ray node, fake-gcs-server writing to the bucket's folder)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from functions.local import emulators

FILE = "session.json"
RAY_TMP_PREFIX = "rt-"  # Ray's socket paths are length-limited: its temp dir is short, directly under /tmp


@dataclass(frozen=True)
class Session:
    tag: str
    ray_tmp: str


def _path(workdir: Path) -> Path:
    return workdir / "logs" / FILE


def new_ray_tmp() -> str:
    return tempfile.mkdtemp(prefix=RAY_TMP_PREFIX, dir="/tmp")


def scratch(ray_tmp: str) -> str:
    """The cluster's processes' temp folder (TMPDIR), inside its Ray folder: removed with it."""
    path = Path(ray_tmp) / "tmp"
    path.mkdir(exist_ok=True)
    return str(path)


def write(workdir: Path, session: Session) -> None:
    _path(workdir).parent.mkdir(parents=True, exist_ok=True)
    _path(workdir).write_text(json.dumps(asdict(session)))


def read(workdir: Path) -> Session | None:
    try:
        return Session(**json.loads(_path(workdir).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def processes(session: Session) -> list[int]:
    """The session's live processes: those carrying its tag or holding a file in its Ray temp dir."""
    return emulators.tagged_or_holding(session.tag, Path(session.ray_tmp))


def stop(workdir: Path) -> list[int]:
    """Stop what the workdir's recorded session left running (an earlier run that was killed, or this one
    at its end), remove its Ray temp dir (only a folder this module made: the file is the user's to edit)
    and the record. The caller holds the workdir lock. Returns the pids it stopped."""
    recorded = read(workdir)
    if recorded is None:
        return []
    stopped = emulators.kill_all(lambda: processes(recorded))
    ray_tmp = Path(recorded.ray_tmp)
    if ray_tmp.parent == Path("/tmp") and ray_tmp.name.startswith(RAY_TMP_PREFIX):
        shutil.rmtree(ray_tmp, ignore_errors=True)
    _path(workdir).unlink(missing_ok=True)
    return stopped
