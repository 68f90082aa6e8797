"""The keeper of a warm local Ray cluster: started, detached, by the `raytune local` that left its head warm
(session.keep_warm), it stops the session's processes once the head has been idle until the session's warm_until,
and never while a run holds the workdir (a run that attaches marks the session in use; its clean end sets a new
time, which the keeper then waits for). It ends when the session is stopped or replaced (`raytune local --stop`, or
a run that found the head gone), and stops the session itself when a run that took it died. What it keeps it stops
whatever becomes of the workdir: a workdir deleted under a warm head (its session file gone with it) leaves no
process behind, since the keeper remembers the session it was started for and stops its processes by their tag.

    python -m functions.local.keeper WORKDIR TAG
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from functions.local import emulators, session
from functions.local.workdirs import held_if_free, holder

POLL_S = 2.0
log = logging.getLogger(__name__)


def keep(workdir: Path, tag: str) -> None:
    kept = session.read(workdir)  # what it keeps, remembered: the workdir may be deleted under it
    if kept is None or kept.tag != tag:
        kept = session.WorkdirSession(tag, ray_tmp="")
    _log_to(workdir)
    while True:
        try:
            current = session.read(workdir)
            if current is None or current.tag != tag:
                # stopped (nothing of it is left: this finds nothing), replaced by a session of its own, or its
                # workdir deleted under a warm head: whatever still carries its tag goes now
                _stop_what_is_left(kept)
                return
            idle = current.warm_until is not None and current.warm_until <= time.time()
            abandoned = current.warm_until is None and holder(workdir) is None  # its run died holding it
            if (idle or abandoned) and _stopped(workdir, tag):
                log.info("stopped the session %s (%s)", tag, "idle" if idle else "its run died")
                return
        except Exception:  # a keeper that gave up would leave the head up for good: it tries again
            log.exception("keeping the session %s", tag)
        time.sleep(POLL_S)


def _log_to(workdir: Path) -> None:
    try:
        logging.basicConfig(
            filename=workdir / "logs" / "keeper.log", level=logging.INFO, format="%(asctime)s %(message)s"
        )
    except OSError:
        pass  # its workdir is gone already: there is nothing to log to, and its processes still go


def _stop_what_is_left(kept: session.WorkdirSession) -> None:
    if not kept.ray_tmp:  # not known: only what carries the tag (never "whatever holds a file under /")
        stopped = emulators.kill_all(lambda: emulators.tagged(kept.tag))
    else:
        stopped = session.stop_processes(kept)
    if stopped:
        log.info("stopped the session %s (its workdir's session file is gone): pids %s", kept.tag, stopped)


def _stopped(workdir: Path, tag: str) -> bool:
    """Stop the session under the workdir's lock, judged again under it; False when a run holds the workdir."""
    with held_if_free(workdir) as held:
        if not held:
            return False
        current = session.read(workdir)
        if current is not None and current.tag == tag:
            if current.warm_until is not None and current.warm_until > time.time():
                return False  # a run ended meanwhile and set a new time
            session.stop(workdir)
        return True


if __name__ == "__main__":
    keep(Path(sys.argv[1]), sys.argv[2])
