"""Run a bench and write its tables into docs/performance.md, between the page's markers for it, with what
measured them: the commit (and whether functions/ or trainer/ had changes on top), the command, the cores and
the load. The figures on the page are a bench's own output, never typed.

    .venv/bin/python bench/publish.py NAME -- .venv/bin/python bench/collator.py --repeats 5

NAME: the page's `<!-- bench:NAME -->` ... `<!-- /bench:NAME -->` block. The bench's output goes to the
terminal as it runs; its markdown tables (and the line just before each, its caption) go on the page."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    found = git("rev-parse", "--short", "HEAD") or "unknown"
    return found + (" with uncommitted changes" if git("status", "--porcelain", "--", "functions", "trainer") else "")


def tables(output: str) -> list[str]:
    """The markdown tables of a bench's output, each with the line before it (its caption), blank-separated."""
    lines = output.splitlines()
    kept: list[str] = []
    for index, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        if index == 0 or not lines[index - 1].startswith("|"):  # a table starts: its caption first
            caption = next((text for text in reversed(lines[:index]) if text.strip()), "")
            kept += ["", caption.strip(), ""] if caption and not caption.startswith("|") else [""]
        kept.append(line)
    return kept[1:] if kept[:1] == [""] else kept


def write(name: str, block: list[str], page: Path = PAGE) -> None:
    text = page.read_text()
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{page} has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    page.write_text(head + start + "\n" + "\n".join(block) + "\n" + end + tail)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("usage: publish.py NAME [--page PAGE] -- COMMAND ...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    started, measured_at = dt.datetime.now(), commit()  # the code as it was when the bench began
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        print(f"publish: the bench exited {done.returncode}; the page is unchanged", file=sys.stderr)
        return done.returncode
    found = tables(done.stdout)
    if not found:
        print("publish: the bench printed no table; the page is unchanged", file=sys.stderr)
        return 1
    shown = shlex.join([Path(command[0]).name if command[0].endswith("python") else command[0], *command[1:]])
    provenance = (
        f"Measured at commit {measured_at} on {started:%Y-%m-%d}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f} at the end, {(dt.datetime.now() - started).total_seconds():.0f} s: `{shown}`"
    )
    write(args.name, [provenance, "", *found], args.page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
