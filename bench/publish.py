"""A bench's table into docs/performance.md, between its markers, with what measured it: the commit (and whether
the tree had changes on top), the command, the machine's cores and load, the date. The figures are the bench's
own output, never typed."""

from __future__ import annotations

import datetime as dt
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" with uncommitted changes" if git("status", "--porcelain", "--", "functions", "trainer") else "")


def provenance(argv: list[str] | None = None) -> str:
    command = shlex.join(["python", *(sys.argv if argv is None else argv)])
    load = os.getloadavg()[0]
    return (
        f"Measured at commit {_commit()} on {dt.date.today().isoformat()}, {os.cpu_count()} cores at load "
        f"{load:.1f} when it ended: `{command}`"
    )


def publish(name: str, lines: list[str], page: Path = PAGE) -> None:
    """Replace the block between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` with the provenance and `lines`."""
    text = page.read_text()
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{page} has no {start} ... {end} block to write into")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(head + start + "\n" + provenance() + "\n\n" + "\n".join(lines) + "\n" + end + tail)
