"""`raytune local` end to end, as a user runs it: the quickstart (the shipped default) in a fresh workdir and a
throwaway HOME, this checkout against another version of it (`--against DIR`: a checkout, e.g.
`git worktree add /tmp/before <commit>`), interleaved in one run (the order rotates each round), so load on the
machine falls on both alike. Reported per version, min / median / max: wall time, the CPU time of every process
the run started (a cpuacct cgroup where this user may make one, else the whole machine's busy time, which
counts neighbours too: the table says which), and the moments a person waits for. `--processes` also samples
every process the run starts (/proc, every 0.3 s) and reports their CPU by kind: Ray's own processes by their
title, the training workers, the job's driver, the controller (`raytune local` itself).

    .venv/bin/python bench/local_e2e.py --against /tmp/before --runs 5 [--processes] [--warm] [--after 120]

Every version's run is a cold one (RAYTUNE_LOCAL_KEEP_WARM_S=0: the cluster started and stopped with the run, as
before warm clusters). `--warm` adds "this, warm": the same quickstart in a workdir whose head an earlier run left
warm (started once, before the first round, outside the measure), its head's processes joined to the run's cgroup
for the run, so what the head does for it is counted. `--after SECONDS` instead leaves each version to its own
default (how long it keeps a head warm after a first run) and measures, besides the run, the CPU of what the run
left running over SECONDS from its end (its warm head and keeper; then `raytune local --stop` ends what is left).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = re.compile(r"^\[\s*([0-9.]+)s\] (.*)$")
sys.path.insert(0, str(ROOT))
from tests.cgroup import CpuGroup  # noqa: E402  (the suite measures with the same group)

CLI = "import sys; from functions.cli import main; sys.exit(main())"  # raytune, from the code on PYTHONPATH


def phases(console: str) -> dict[str, float]:
    """Seconds from start at which each moment came, read off the console lines."""
    marks = {}
    for line in console.splitlines():
        match = STAMP.match(line)
        if not match:
            continue
        at, text = float(match.group(1)), match.group(2)
        if "is SUBMITTED" in text or ": SUBMITTED" in text:  # the console before and since issue 40
            marks.setdefault("submitted", at)
        elif text.strip().startswith("step "):
            marks.setdefault("first step", at)
            marks["last step"] = at
        elif "scaled down" in text:
            marks.setdefault("scaled down", at)
    return marks


def machine_busy_s() -> float:
    """Seconds of CPU the whole machine spent outside idle and iowait (/proc/stat)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def cpu_meter() -> Iterator[tuple[dict, callable, callable]]:
    """(result, join, used): `join(pid)` puts a process (and so all it starts) in a cgroup of its own; `used()` is
    that cgroup's CPU time so far; result["cpu_s"] is its CPU time once the block ends. Where no cgroup can be
    made, the machine's busy time stands for it."""
    result: dict = {}
    group = CpuGroup.made("raytune-bench")
    busy = machine_busy_s()

    def join(pid: int) -> None:
        if group is not None:
            group.join(pid)

    def used() -> float:
        return group.used_s() if group is not None else machine_busy_s() - busy

    try:
        yield result, join, used
    finally:
        result.setdefault("cpu_s", used())  # the caller's reading at the run's end, where it took one
        result["cpu_of"] = "cgroup" if group is not None else "machine"
        if group is not None:
            group.remove()


# A process's kind, from its command line (Ray's workers write their title over it: "ray::TrainController.run").
KINDS = (
    ("dashboard/dashboard.py", "Ray dashboard (head)"),
    ("forkserver", "Ray dashboard modules (head)"),
    ("ray.util.client.server", "Ray client server (head)"),
    ("gcs_server", "Ray GCS (head)"),
    ("log_monitor", "Ray log monitor (each node)"),
    ("raylet/raylet", "raylet (each node)"),
    ("dashboard/agent.py", "Ray dashboard agent (each node)"),
    ("ray::DashboardAgent", "Ray dashboard agent (each node)"),
    ("ray::RuntimeEnvAgent", "Ray runtime env agent (each node)"),
    ("runtime_env/agent", "Ray runtime env agent (each node)"),
    (" start --block", "`ray start` (each node)"),
    ("trainer.train", "the job's driver"),
    ("fake-gcs-server", "fake-gcs-server"),
    ("functions.cli import main", "raytune local (the controller)"),
)


def kind_of(command: str) -> str:
    if command.startswith("ray::"):
        return command.split()[0].split(".")[0]  # an actor's title, its method left out
    return next((name for needle, name in KINDS if needle in command), command[:40] or "unnamed")


def processes_cpu(root_pid: int, done: threading.Event, found: dict[str, float], warm: Iterable[int] = ()) -> None:
    """Until `done`: every 0.3 s, the CPU of each descendant of `root_pid` (and of itself) and of the `warm` head's
    processes and theirs, named by kind; each process counted once, at the last look it was alive, less what it had
    used at the first look (a warm head's processes ran before the run), under the first name it had that is not
    Ray's idle worker's (a worker takes its actor's title once it has one)."""
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[tuple[int, int], list] = {}  # (pid, start tick) -> [cpu s, kind]
    before: dict[tuple[int, int], float] = {}  # CPU at the first look, of the processes alive then
    family = {root_pid, *warm}
    first = True
    while True:
        stopping = done.is_set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            pid, parent = int(entry.name), int(stat[1])
            if pid not in family and parent not in family:
                continue
            family.add(pid)
            key, cpu = (pid, int(stat[19])), (int(stat[11]) + int(stat[12])) / tick
            if first:
                before[key] = cpu
            kind = kind_of(command)
            if key in seen and (not command or kind == "ray::IDLE"):
                kind = seen[key][1]
            seen[key] = [cpu, kind]
        if stopping:
            break
        first = False
        time.sleep(0.3)
    for key, (cpu, kind) in seen.items():
        found[kind] = found.get(kind, 0.0) + cpu - before.get(key, 0.0)


def raytune_local(args: list[str], env: dict[str, str], home: str, stderr: int) -> subprocess.Popen:
    """`raytune local ARGS` as a user starts it, from `home`, its output piped (stderr: PIPE or STDOUT)."""
    return subprocess.Popen(
        [sys.executable, "-c", CLI, "local", *args], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=home
    )


def one_run(root: Path, processes: bool = False, warm: Path | None = None, after_s: float = 0) -> dict:
    """The quickstart with `root`'s code (first on the path, its nodes and jobs given the same), cold in a new
    workdir, or in `warm`, a workdir whose head is warm; `after_s`: with the version's own keep-warm default, and
    the CPU of what it left running over that long after its end."""
    with contextlib.ExitStack() as stack:
        workdir = str(warm) if warm else stack.enter_context(tempfile.TemporaryDirectory())
        home = stack.enter_context(tempfile.TemporaryDirectory())
        cpu, join, used = stack.enter_context(cpu_meter())
        env = {
            **os.environ,
            "HOME": home,
            "PYTHONPATH": str(root),
            "RAYTUNE_LOCAL_KEEP_WARM_S": "3600" if warm else "0",
        }
        if after_s:
            del env["RAYTUNE_LOCAL_KEEP_WARM_S"]
        head = warm_head(warm) if warm else []
        for pid in head:
            with contextlib.suppress(OSError):  # gone meanwhile
                join(pid)
        started = time.monotonic()
        proc = raytune_local(["--workdir", workdir], env, home, stderr=subprocess.STDOUT)
        join(proc.pid)
        done, by_kind = threading.Event(), {}
        sampler = threading.Thread(target=processes_cpu, args=(proc.pid, done, by_kind, head)) if processes else None
        if sampler:
            sampler.start()
        console, _ = proc.communicate(timeout=900)
        wall = time.monotonic() - started
        if sampler:
            done.set()
            sampler.join()
        if proc.returncode != 0:
            raise SystemExit(f"run of {root} failed:\n{console[-4000:]}")
        if after_s:
            cpu["cpu_s"] = used()  # the run's; what it leaves running is counted apart
            time.sleep(after_s)
            cpu["after_cpu_s"] = used() - cpu["cpu_s"]
            stop = [sys.executable, "-c", CLI, "local", "--stop", "--workdir", workdir]
            subprocess.run(stop, env=env, cwd=home, capture_output=True, check=False)
        if warm and "reusing the warm local Ray cluster" not in console:
            raise SystemExit(f"the run in {warm} did not find its head warm:\n{console[-4000:]}")
        newest = max((Path(workdir) / "records").glob("*.json"), key=lambda path: path.stat().st_mtime)
        record = json.loads(newest.read_text())
    train = record["result"]["metrics"]["train_runtime_seconds"]
    return {"wall_s": wall, **cpu, "train_s": train, **phases(console), **({"processes": by_kind} if processes else {})}


def warm_head(workdir: Path) -> list[int]:
    """The processes of the workdir's warm session (its head's): those carrying its tag or holding its Ray folder."""
    from functions.local import session

    found = session.read(workdir)
    return session.processes(found) if found else []


def warmed(root: Path) -> Path:
    """A workdir whose head a first quickstart left warm (for an hour; `raytune local --stop` ends it)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    env = {**os.environ, "PYTHONPATH": str(root), "RAYTUNE_LOCAL_KEEP_WARM_S": "3600"}
    done = raytune_local(["--workdir", str(workdir)], env, str(workdir), stderr=subprocess.STDOUT)
    console, _ = done.communicate(timeout=900)
    if done.returncode != 0 or "stays up" not in console:
        raise SystemExit(f"the warming run failed:\n{console[-4000:]}")
    return workdir


def table(samples: dict[str, list[dict]]) -> list[str]:
    cores = os.cpu_count()
    lines = [f"| measure (s; {cores} cores) | " + " | ".join(f"{v}: min / median / max" for v in samples) + " |"]
    lines.append("|---" * (len(samples) + 1) + "|")
    first = next(iter(samples.values()))
    for key in [k for k in first[0] if k not in ("cpu_of", "processes")]:
        cells = []
        for runs in samples.values():
            values = [run[key] for run in runs if key in run]
            cells.append(f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}" if values else "-")
        name = f"cpu ({first[0]['cpu_of']})" if key == "cpu_s" else key
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def processes_table(samples: dict[str, list[dict]]) -> list[str]:
    """CPU seconds by kind of process, min / median / max over the runs (0 in a run without that kind); kinds
    that never took 0.05 s in any run (shells, sleeps) are left out."""
    kinds = sorted(
        {kind for runs in samples.values() for run in runs for kind, cpu in run["processes"].items() if cpu >= 0.05},
        key=lambda kind: (
            -max(statistics.median(run["processes"].get(kind, 0.0) for run in runs) for runs in samples.values())
        ),
    )
    lines = ["| process (CPU s) | " + " | ".join(f"{v}: min / median / max" for v in samples) + " |"]
    lines.append("|---" * (len(samples) + 1) + "|")
    for kind in kinds:
        cells = []
        for runs in samples.values():
            values = [run["processes"].get(kind, 0.0) for run in runs]
            cells.append(f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, help="a checkout of the version to compare with")
    parser.add_argument("--processes", action="store_true", help="also the CPU of each kind of process it starts")
    parser.add_argument("--warm", action="store_true", help="also this version's run on a warm local cluster")
    parser.add_argument(
        "--after",
        type=float,
        default=0,
        help="with each version's keep-warm default: the CPU of "
        "what a run leaves running over this many seconds after its end",
    )
    args = parser.parse_args(argv)
    versions = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    warm = warmed(ROOT) if args.warm else None
    runs = {name: (root, None) for name, root in versions.items()} | ({"this, warm": (ROOT, warm)} if warm else {})
    samples: dict[str, list[dict]] = {name: [] for name in runs}
    try:
        for round_ in range(args.runs):
            order = list(runs)
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for name in order:
                root, workdir = runs[name]
                samples[name].append(one_run(root, args.processes, workdir, args.after))
                said = ", ".join(f"{k} {v}" for k, v in samples[name][-1].items())
                print(f"round {round_ + 1} {name}: {said}", flush=True)
    finally:
        if warm is not None:
            subprocess.run([sys.executable, "-c", CLI, "local", "--stop", "--workdir", str(warm)], check=False)
    after = f"; after_cpu_s: what the run left running, over {args.after:.0f} s from its end" if args.after else ""
    print(f"\nraytune local end to end, {args.runs} runs of each version interleaved, seconds from start{after}")
    print("\n".join(table(samples)))
    if args.processes:
        print(f"\nthe CPU of each kind of process a quickstart starts, {args.runs} runs of each version interleaved")
        print("\n".join(processes_table(samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
