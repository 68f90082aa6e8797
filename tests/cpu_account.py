"""The suite's CPU, by tier: each test process (the xdist workers) in a cgroup of its own, so every process a test
starts (Ray's, the emulators', a story's `raytune local`) is counted with it, and each test's share read from
the group around it. At the end of the run, a table of CPU-seconds by tier (tests/<tier>/) and the tests that
took most; issue 68 holds the suite to a CPU budget, which a wall time on a shared machine cannot show.

Where no cgroup can be made (cgroup v2 only, no rights), nothing is measured and the table says so. What a test
leaves running (a warm head, a session's emulator) is counted with the tests that run while it works."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from tests.cgroup import CpuGroup

_group: CpuGroup | None = None


def _usage() -> float | None:
    return _group.used_s() if _group is not None else None


def pytest_configure(config: pytest.Config) -> None:
    global _group
    _group = CpuGroup.made("raytune-tests", os.getpid())


def pytest_unconfigure(config: pytest.Config) -> None:
    global _group
    if _group is not None:
        _group.remove()
    _group = None


_started: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Read where the test runs (an xdist worker; xdist's controller only hears of it)."""
    if (now := _usage()) is not None:
        _started[item.nodeid] = now


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and (now := _usage()) is not None and item.nodeid in _started:
        # On the test's last report, which xdist carries to the process that prints the summary.
        report.user_properties.append(("cpu_s", now - _started.pop(item.nodeid)))


def _tier(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    spent: dict[str, float] = defaultdict(float)
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "cpu_s" and getattr(report, "when", None) == "teardown":
                    spent[report.nodeid] += value
    write = terminalreporter.write_line
    terminalreporter.section("CPU-seconds by tier (cgroup)")
    if not spent:
        write("not measured: no cgroup could be made here (cgroup v1 cpuacct, writable)")
        return
    tiers: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in spent.items():
        tiers[_tier(nodeid)].append(seconds)
    write(f"{'tier':<12} {'tests':>6} {'CPU-s':>9}")
    for tier, values in sorted(tiers.items(), key=lambda kv: -sum(kv[1])):
        write(f"{tier:<12} {len(values):>6} {sum(values):>9.1f}")
    write(f"{'all':<12} {len(spent):>6} {sum(spent.values()):>9.1f}")
    write("the 15 tests that took most CPU:")
    for nodeid, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:15]:
        write(f"{seconds:8.1f}s  {nodeid}")
