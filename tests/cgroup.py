"""A cgroup v1 cpuacct group of our own: a process put in it, and every process it starts after, is counted
together, whoever outlives whom. The suite's CPU account (tests/cpu_account.py) and the local end-to-end bench
(bench/local_e2e.py) measure with it. Where no group can be made (cgroup v2 only, no rights), `made` says None."""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuGroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def made(cls, prefix: str, pid: int | None = None) -> CpuGroup | None:
        """A new group (with `pid` in it, where given); None where this machine or user cannot make one."""
        group = cls(CPUACCT / f"{prefix}-{uuid.uuid4().hex[:8]}")
        try:
            group.path.mkdir()
            if pid is not None:
                group.join(pid)
        except OSError:
            with contextlib.suppress(OSError):
                group.path.rmdir()
            return None
        return group

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def used_s(self) -> float:
        """CPU-seconds of every process that was in the group, so far."""
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        """What is still in the group (this process, what outlived the measure: a head left warm) goes back to
        the root group, then the group is removed: cgroup v1 keeps an empty group until someone removes it."""
        for _ in range(5):  # a process forked meanwhile joins the group after the listing: list again
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # it exited meanwhile
                    (CPUACCT / "cgroup.procs").write_text(pid)
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)
