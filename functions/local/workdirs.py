"""A `raytune local` workdir: which one a run takes (the default, the next free `.raytune/local-N`, or the one
asked for), the lock that holds it for one run and proves who holds it, the note by which another terminal asks
the holder to cancel, the records it keeps and the controller's log it writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from functions.core.runs import RunRecord

DEFAULT_WORKDIR = Path(".raytune/local")
MLFLOW_STORE = "mlflow.db"  # the embedded default's MLflow store, an SQLite file in the workdir
CANCEL_NOTE = "cancel-request.json"  # in the workdir: who asked the raytune local holding it to cancel its run


def mlflow_store(workdir: Path) -> str:
    """The workdir's MLflow store as MLflow names it (`mlflow ui --backend-store-uri URI` opens it)."""
    return f"sqlite:///{(workdir / MLFLOW_STORE).resolve()}"


@contextlib.contextmanager
def controller_log(workdir: Path) -> Iterator[None]:
    """The controller's own INFO log (every transition and sizing) into logs/controller.log for the run."""
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(workdir / "logs" / "controller.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("functions").addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger("functions").removeHandler(handler)
        handler.close()


def holder(workdir: Path) -> int | None:
    """The pid of the raytune local holding `workdir`, proven by its lock (a pid read from the file alone proves
    nothing: its process may be dead and the pid reused); None when none holds it; 0 while one is taking it."""
    lock = workdir / ".lock"
    if not lock.is_file():
        return None
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


@contextlib.contextmanager
def held_if_free(workdir: Path) -> Iterator[bool]:
    """The workdir's lock, if no run holds it (True while held here): for what stops a warm cluster, which must never
    stop one a run is using."""
    with open(workdir / ".lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def candidates(requested: Path | None) -> list[Path]:
    """The workdirs a run may take: the one asked for, else the default and the next free .raytune/local-N."""
    return [requested] if requested else [DEFAULT_WORKDIR, *(Path(f"{DEFAULT_WORKDIR}-{n}") for n in range(2, 10))]


@contextlib.contextmanager
def workdir_lock(requested: Path | None) -> Iterator[Path]:
    """Hold the workdir for this run. The default one taken by a run in progress: the next free
    `.raytune/local-N`; an explicit one: an error naming who holds it."""
    for workdir in candidates(requested):
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        handle = open(workdir / ".lock", "a+")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            if requested:
                raise RuntimeError(
                    f"{workdir} is in use by another raytune local (pid {holder}); "
                    "pass another --workdir to run both at once"
                ) from None
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield workdir
        finally:
            handle.close()
        return
    raise RuntimeError("every default workdir is in use; pass --workdir")


def passed_over(requested: Path | None, taken: Path) -> list[str]:
    """Why a run took `taken` and not a default workdir before it: each one in use, with its run and its pid."""
    said = []
    for workdir in candidates(requested):
        workdir = workdir.resolve()
        if workdir == taken:
            break
        pid = holder(workdir)
        records = sorted((workdir / "records").glob("*.json"), key=lambda p: p.stat().st_mtime)
        run = f"run {records[-1].stem}" if records else "a run"
        said.append(f"{workdir} is busy with {run} (raytune local pid {pid or '?'}): this run takes {taken}")
    return said


def ask_cancel(workdir: Path, pid: int, by: str) -> None:
    """`raytune cancel` of the run a raytune local (pid) follows: the reason noted for it, then its interrupt."""
    (workdir / CANCEL_NOTE).write_text(json.dumps({"pid": pid, "by": by}))
    os.kill(pid, signal.SIGINT)


def cancel_asked(workdir: Path) -> str | None:
    """Why this process was interrupted, when `raytune cancel` asked it to (the note names this process)."""
    note = workdir / CANCEL_NOTE
    try:
        asked = json.loads(note.read_text())
        note.unlink()
    except (OSError, ValueError):
        return None
    return str(asked.get("by")) if isinstance(asked, dict) and asked.get("pid") == os.getpid() else None


def write_record(workdir: Path, record: RunRecord) -> Path:
    path = workdir / "records" / f"{record.run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=2))
    return path
