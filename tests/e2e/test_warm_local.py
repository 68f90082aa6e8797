"""A local cluster that stays warm (issue 56): `raytune local` leaves its Ray head up after a run that ended on its
own, the next run of the workdir attaches to it (no head start), `raytune local --stop` stops it at once, the keeper
stops it by itself once idle, and an interrupt on a warm cluster still leaves nothing behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from functions.local.session import KEEP_WARM_ENV, KEEP_WARM_S
from tests.e2e.test_local import (
    RAYTUNE,
    finish,
    interrupt_after,
    marked_processes,
    one_node,
    processes_text,
    reaped,
    start,
)

pytestmark = pytest.mark.slow
__all__ = ["reaped"]  # its clean-up applies here too


def gone(mark: str, within_s: float) -> list[int]:
    """The test's processes still alive after waiting up to `within_s` for them to go."""
    deadline = time.monotonic() + within_s
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_the_next_run_reuses_the_warm_head_and_stop_or_idle_stops_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    workdir = tmp_path / "w"
    config = one_node(tmp_path)  # the subject is the head: one training worker is enough
    first, mark = start(workdir, config, "--keep-warm", "120", "--timings", "--json", home=home)
    out, err = finish(first)
    assert first.returncode == 0 and json.loads(out)["state"] == "SUCCEEDED", err[-3000:]
    assert "local: starting the Ray head" in err and "stays up 120s" in err
    head = json.loads((workdir / "logs" / "session.json").read_text())
    assert head["head_pid"] in marked_processes(mark) and head["warm_until"] > time.time() + 60
    # The next run attaches: no head started, its own run on the same head. Told nothing of how long to keep it,
    # it keeps it long: a run on a warm head shows a person iterating (session.keep_warm_for).
    second, _ = start(workdir, config, "--timings", "--json", home=home, without=(KEEP_WARM_ENV,))
    out, err = finish(second)
    assert second.returncode == 0 and json.loads(out)["state"] == "SUCCEEDED", err[-3000:]
    assert f"reusing the warm local Ray cluster an earlier run left (head pid {head['head_pid']})" in err
    assert f"stays up {KEEP_WARM_S:.0f}s (you are iterating)" in err, err[-3000:]
    assert "local: starting the Ray head" not in err and "local: starting worker nodes" in err
    # `--stop` stops it now: the head, the workers' leftovers and the keeper (which sees its session gone).
    stopped = subprocess.run(
        [RAYTUNE, "local", "--stop", "--workdir", str(workdir)], capture_output=True, text=True, timeout=120
    )
    assert stopped.returncode == 0 and re.search(
        r"stopped the local Ray cluster of .* \(\d+ processes\)", stopped.stdout
    )
    assert not (left := gone(mark, 15)), "left after --stop:\n" + processes_text(left)
    # Idle: the keeper stops it by itself once its time is up.
    third, mark = start(workdir, config, "--keep-warm", "3", "--json", home=home)
    out, err = finish(third)
    assert third.returncode == 0 and "stays up 3s" in err, err[-3000:]
    assert not (left := gone(mark, 30)), "left after the idle time:\n" + processes_text(left)
    assert not (workdir / "logs" / "session.json").exists()


def test_an_interrupt_on_a_warm_cluster_leaves_nothing_behind(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    workdir = tmp_path / "w"
    config = one_node(tmp_path)
    first, mark = start(workdir, config, "--keep-warm", "120", "--json", home=home)  # --json: the console on stderr
    _, err = finish(first)
    assert first.returncode == 0 and "stays up 120s" in err, err[-3000:]
    second, _ = start(workdir, config, "--keep-warm", "120", "--json", home=home)
    console = interrupt_after(second, ": RUNNING", signal.SIGINT)
    second.wait(timeout=300)
    console.join(timeout=60)
    assert second.returncode == 130 and "reusing the warm local Ray cluster" in console.err, console.err[-3000:]
    assert "CANCELLED" in console.err and "stays up" not in console.err
    assert not (left := gone(mark, 30)), "left after the interrupt:\n" + processes_text(left)
