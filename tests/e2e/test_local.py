"""README's main command: `raytune local` runs a fine-tune end to end on the embedded local default, on a
fresh machine (no Ray token in the home directory) and a busy one (Ray's default ports held, another
run at once), and stops everything it started whatever the moment it is interrupted."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest

from functions.core.story import SHOWN_PHASE_S
from functions.local import emulators

ROOT = Path(__file__).resolve().parents[2]
RAYTUNE = str(Path(sys.executable).parent / "raytune")
RAY_DEFAULT_PORTS = (6379, 8265, 10001, 52365)
pytestmark = pytest.mark.slow


MARK = "RAYTUNE_TEST_MARK"  # each raytune local a test starts, and all it starts, carry it (tagged by the test)


def marked_processes(mark: str) -> list[int]:
    """Processes of one test run: every child inherits the RAYTUNE_TEST_MARK the test set."""
    return emulators.tagged(mark, variable=MARK)


def processes_text(pids: list[int]) -> str:
    """Leftover processes, for a failure message: pid, state and command line."""
    lines = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid} {state} {command[:200]}")
        except OSError:
            lines.append(f"{pid} gone")
    return "\n".join(lines)


STARTED: list[tuple[str, Path]] = []  # each raytune local a test started: its mark and its workdir


@pytest.fixture(autouse=True)
def reaped():
    """Whatever a test's raytune local left running when the test failed midway (its training run, its Ray
    cluster) is killed as the test ends, so it cannot load the machine for the tests after it. Only processes
    carrying the test's own mark, or holding a file in its workdir, are touched."""
    yield
    while STARTED:
        mark, workdir = STARTED.pop()
        folder, sessions = workdir.resolve(), set()
        emulators.kill_all(
            lambda mark=mark, folder=folder, sessions=sessions: emulators.tagged_or_holding(
                mark, folder, sessions, variable=MARK
            )
        )


def start(workdir: Path, *args: str, home: Path, without: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """`raytune local` in `workdir` with these arguments (`without`: environment variables left out)."""
    mark = uuid.uuid4().hex
    STARTED.append((mark, workdir))
    env = {**{k: v for k, v in os.environ.items() if k not in without}, "HOME": str(home), MARK: mark}
    proc = subprocess.Popen(
        [RAYTUNE, "local", "--workdir", str(workdir), *args],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, mark


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    return out, err


def held_ports() -> ExitStack:
    """Listeners on Ray's default ports, as a neighbour's Ray would hold them."""
    stack = ExitStack()
    for port in RAY_DEFAULT_PORTS:
        sock = stack.enter_context(socket.socket())
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            pass  # held already, by CI's own dummy listener or a real neighbour: busy either way
    return stack


def check_success(out: str, err: str, workdir: Path) -> dict:
    record = json.loads(out)
    assert record["state"] == "SUCCEEDED" and record["settled"], err[-4000:]
    assert [h["state"] for h in record["history"]] == ["RECEIVED", "SUBMITTED", "RUNNING", "SUCCEEDED"]
    assert ": SUBMITTED" in err and "worker group: 2 nodes" in err
    assert ": RUNNING" in err and "worker group: 0 nodes" in err
    assert "event -> local/run-events: run-finished" in err
    # One line per event on the terminal; the controller's own log (transitions, sizing) is in logs/controller.log
    controller = (workdir / "logs" / "controller.log").read_text()
    assert "worker nodes 2 -> 0" in controller and "worker nodes 2 -> 0" not in err
    run_id = record["run_id"]
    # Said once, by the summary (indented lines are its details and the --timings table)
    said = [line for line in err.splitlines() if "SUCCEEDED" in line and not line.split("] ", 1)[1].startswith(" ")]
    assert len(said) == 1, said
    assert f"run {run_id} SUCCEEDED in " in err
    assert ": 0.0s" not in err, "a phase that took no time says nothing"
    # One line per progress event, none twice; evaluations at each epoch's end.
    progress = [line.split("]", 1)[1].strip() for line in err.splitlines() if "  step " in line]
    assert len(progress) == len(set(progress)) and "step 14/14" in progress[-1]
    assert sum("eval loss" in line for line in progress) == 2 and "ETA" in progress[0]
    result = record["result"]
    # 32 samples, 4 held out by the hash of their product name (eval_fraction 0.25):
    # 28 / (2 workers x batch 2) = 7 steps an epoch, 2 epochs.
    assert result["metrics"]["global_step"] == 14 and result["metrics"]["best_checkpoint_by"] == "eval_loss"
    assert all(Path(c).is_dir() for c in result["checkpoints"])
    adapter = Path(result["adapter_path"])
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert (adapter / base / "config.json").exists(), "the tiny base model is kept with its adapter"
    assert (workdir / "records" / f"{record['run_id']}.json").exists()
    # The job's log has each line its workers printed once (Ray Train's print patch would send each twice).
    driver_log = (workdir / "logs" / f"{record['run_id']}-driver.log").read_text()
    reports = [line for line in driver_log.splitlines() if "RAYTUNE_PROGRESS " in line]
    # losses at steps 2, 4 ... 14 and evaluations at 7 and 14: 9 lines, none twice
    assert len(reports) == 9 and len(set(reports)) == len(reports), reports
    # No silence before the first step: each phase of the job's start is printed as it begins and as it ends,
    # and the record keeps the timeline (its states, then the job's phases in the order they ran).
    lines = [line.split("]", 1)[1].strip() for line in err.splitlines() if line.startswith("[")]
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step "))
    timings = record["timings"]
    # (a phase begun and ended between two looks of the console is one line, its time; one shorter than
    # SHOWN_PHASE_S says nothing: the tiny model loads in 0.03-0.3 s)
    for phase in ("starting 2 workers", "importing torch, transformers, trl and peft", "loading the model"):
        said = [i for i, line in enumerate(lines) if re.fullmatch(rf"{re.escape(phase)}: [0-9.]+s", line)]
        if timings[f"job: {phase}"] < SHOWN_PHASE_S:
            assert not said, phase
            continue
        assert said, phase
        began = lines.index(f"{phase}...") if f"{phase}..." in lines else said[0]
        assert began <= said[0] < first_step, phase
    assert lines.index("starting 2 workers...") < first_step, "a long phase is said as it begins"
    assert list(timings)[:3] == ["RECEIVED", "SUBMITTED", "RUNNING"], timings
    job = [name.removeprefix("job: ") for name in timings if name.startswith("job: ")]
    assert job[0] == "preflight" and job.index("starting 2 workers") < job.index("training on 28 samples")
    assert job[-2:] == ["storing the adapter and stopping the workers", "pruning the checkpoints"], job
    assert sum(timings[f"job: {name}"] for name in job) <= timings["RUNNING"] + 1
    return record


def one_node(folder: Path) -> str:
    """The quickstart on one node (one training worker, batches twice as large: the same 14 steps), for the stories
    whose subject is the controller, not a run across nodes (issue 68: each worker is about 9 CPU-seconds of
    imports); the quickstart itself, on its 2 nodes, is test_two_runs_at_once's."""
    config = json.loads((ROOT / "examples" / "quickstart.json").read_text())
    config["scaling"]["nodes"] = 1
    config["training"]["per_device_batch_size"] *= 2
    (path := folder / "quickstart-one-node.json").write_text(json.dumps(config))
    return str(path)


def interrupt_after(proc: subprocess.Popen, trigger: str, sig: signal.Signals) -> threading.Thread:
    """Reads the run's console (stderr) as it comes and sends `sig` once a line holds `trigger`; the thread keeps
    what it read in `.err` and ends with the console."""

    def follow() -> None:
        for line in proc.stderr:
            reader.err += line
            if trigger in line and not reader.sent:
                proc.send_signal(sig)
                reader.sent = True

    reader = threading.Thread(target=follow, daemon=True)
    reader.err, reader.sent = "", False
    reader.start()
    return reader


def test_two_runs_at_once_on_a_busy_fresh_machine(tmp_path):
    """Two runs at once, Ray's default ports held by a neighbour. The second gets Ctrl-C while it stops its
    cluster after the run ended: its outcome stands (exit 0, SUCCEEDED, nothing cancelled) and nothing is left."""
    home = tmp_path / "home"
    home.mkdir()
    with held_ports():
        runs = [start(tmp_path / f"w{i}", "--json", *(["--timings"] if i == 0 else []), home=home) for i in range(2)]
        console = interrupt_after(runs[1][0], "worker group: 0 nodes", signal.SIGINT)
        outputs = [finish(runs[0][0])]
        console.join(timeout=600)
        outputs.append((runs[1][0].stdout.read(), console.err))
        runs[1][0].wait(timeout=120)
    for (proc, mark), (out, err), i in zip(runs, outputs, range(2), strict=True):
        assert proc.returncode == 0, err[-4000:]
        record = check_success(out, err, tmp_path / f"w{i}")
        if i == 0:  # --timings: where the run's time went, the local cluster's start and stop first
            timeline = err[err.index(f"timeline of {record['run_id']}") :]
            for row in ("local: starting the Ray head", "local: starting worker nodes", "RUNNING", "job: preflight"):
                assert re.search(rf"\n\[ *[0-9.]+s\]   {re.escape(row)} +[0-9.]+s\n", timeline), (row, timeline)
        else:
            assert "timeline of" not in err
            assert console.sent and "cancelling the run" not in err, err[-3000:]
            # it landed while the run stopped: after its end (its outcome stands) or in the clean-up (remembered)
            assert "after the run ended (its outcome stands)" in err or "still stopping; one moment" in err, err[-3000:]
            # a killed worker's scratch folder went with the cluster's Ray folder
            assert not list(Path(tempfile.gettempdir()).glob(f"{record['run_id']}-rank*"))
        assert not (left := marked_processes(mark)), "a process of the run outlived it:\n" + processes_text(left)
    assert not (home / ".ray").exists(), "nothing written to the home directory"
    # The adapter is usable: generate a description with it (the tiny model writes nonsense, but writes).
    image = tmp_path / "product.png"
    from trainer import tiny

    tiny.product_image("Toys & Games", 1).save(image)
    described = subprocess.run(
        [
            RAYTUNE,
            "generate",
            "--adapter",
            record["result"]["adapter_path"],
            "--image",
            str(image),
            "--product",
            "Wooden train",
            "--category",
            "Toys",
            "--max-new-tokens",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert described.returncode == 0 and described.stdout.strip(), described.stderr[-2000:]
    assert "a toy's words" in described.stderr  # the tiny model's output is said to be what it is


def wait_for(proc: subprocess.Popen, text: str, lines: list[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"ended before {text!r}: {''.join(lines)[-3000:]}")
        lines.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} within {timeout}s")


@pytest.mark.parametrize(
    ("phase", "trigger", "sig"),
    [("head start", "uploaded ", signal.SIGINT), ("training", "  step ", signal.SIGTERM)],
)
def test_an_interrupt_at_any_moment_leaves_nothing_behind(tmp_path, phase, trigger, sig):
    """Interrupted while it starts or trains, the run is CANCELLED; test_two_runs_at_once... interrupts one after
    its end, while it stops its cluster."""
    home = tmp_path / "home"
    home.mkdir()
    proc, mark = start(tmp_path / "w", one_node(tmp_path), home=home)
    lines: list[str] = []
    wait_for(proc, trigger, lines)
    time.sleep(2 if phase == "head start" else 0)  # into `ray start` of the head
    proc.send_signal(sig)
    out, err = finish(proc, timeout=120)
    text = "".join(lines) + out
    assert proc.returncode == 128 + sig, text[-3000:] + err[-3000:]
    assert "cancelling the run" in text + err
    assert not (left := marked_processes(mark)), (
        f"processes left after an interrupt during {phase}:\n" + processes_text(left)
    )
    [record_file] = (tmp_path / "w" / "records").glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["state"] == "CANCELLED" and record["settled"], record
    # a killed worker's scratch folder went with the cluster's Ray folder
    assert not list(Path(tempfile.gettempdir()).glob(f"{record['run_id']}-rank*"))
    assert f"interrupted ({signal.Signals(sig).name})" in record["reason"]
    assert f"interrupted ({signal.Signals(sig).name})" in text


def test_closing_the_terminal_cancels_the_run_and_stops_everything(tmp_path):
    """SIGHUP, and the terminal's pipes gone with it: the same as Ctrl-C, though nothing can be printed."""
    home = tmp_path / "home"
    home.mkdir()
    proc, mark = start(tmp_path / "w", one_node(tmp_path), "--json", home=home)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and ": RUNNING" not in proc.stderr.readline():
        assert proc.poll() is None
    proc.send_signal(signal.SIGHUP)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 128 + signal.SIGHUP
    assert not (left := marked_processes(mark)), processes_text(left)
    [record_file] = (tmp_path / "w" / "records").glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["state"] == "CANCELLED" and record["settled"] and "interrupted (SIGHUP)" in record["reason"]


def test_a_detached_run_outlives_its_terminal_and_is_followed_from_another(tmp_path):
    """`raytune local --detach`: returns once the run is launched, naming it; the run goes on in a session of
    its own (no terminal to lose) and another terminal follows it to the end."""
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    proc, mark = start(workdir, one_node(tmp_path), "--detach", home=home)
    out, err = finish(proc, timeout=300)
    assert proc.returncode == 0, out + err[-3000:]
    [run_id] = re.findall(r"^run (\S+) is \w+ in the background", out, re.MULTILINE)
    env = {**os.environ, "HOME": str(home)}
    followed = subprocess.run(
        [RAYTUNE, "logs", run_id, "-f", "--workdir", str(workdir)],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # The story as the foreground run tells it, the outcome said once, and the exit code saying it too.
    assert followed.returncode == 0, followed.stdout[-2000:] + followed.stderr[-2000:]
    assert "  step 14/14 · epoch 2.00" in followed.stdout and "RAYTUNE_PROGRESS" not in followed.stdout
    # What it saw as it followed carries the run's age, as the foreground's lines carry theirs.
    assert re.search(r"^\[\s*\d+\.\ds\] ", followed.stdout, re.MULTILINE), followed.stdout[-2000:]
    assert followed.stdout.count("SUCCEEDED") == 1 and f"run {run_id} SUCCEEDED" in followed.stdout
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (workdir / "records" / f"{run_id}.json").exists():
        time.sleep(0.5)
    record = json.loads((workdir / "records" / f"{run_id}.json").read_text())
    assert record["state"] == "SUCCEEDED" and record["settled"]
    assert "run " + run_id in (workdir / "logs" / "console.log").read_text()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and marked_processes(mark):
        time.sleep(0.5)
    assert not (left := marked_processes(mark)), processes_text(left)


def test_an_orphaned_run_is_followed_to_its_end_and_cancelled_from_its_record(tmp_path):
    """Its raytune local killed (SIGKILL): `logs -f` says so and returns instead of waiting forever, and `cancel`
    settles the run from the workdir (its processes stopped) without signalling the dead pid in .lock."""
    home, workdir = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    proc, mark = start(workdir, one_node(tmp_path), home=home)
    lines: list[str] = []
    wait_for(proc, ": RUNNING", lines)
    proc.kill()
    proc.wait()
    [run_id] = re.findall(r"run (\S+): SUBMITTED", "".join(lines))
    env = {**os.environ, "HOME": str(home)}

    def raytune(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [RAYTUNE, *args, "--workdir", str(workdir)], env=env, cwd=home, capture_output=True, text=True, timeout=300
        )

    started = time.monotonic()
    followed = raytune("logs", run_id, "-f")
    assert followed.returncode == 4 and "no raytune local holds" in followed.stdout, followed.stdout[-2000:]
    assert time.monotonic() - started < 30
    cancelled = raytune("cancel", run_id, "--timeout", "120", "--interval", "0.5")
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr[-3000:]
    assert f"{run_id}: CANCELLED" in cancelled.stdout
    assert not (left := marked_processes(mark)), processes_text(left)
    record = json.loads((workdir / "records" / f"{run_id}.json").read_text())
    assert record["state"] == "CANCELLED" and "its raytune local ended before it did" in record["reason"]


def test_a_new_run_settles_what_a_killed_one_left(tmp_path):
    """SIGKILL leaves a live record, a Ray cluster and fake-gcs-server: the next run in the workdir stops
    those processes and cancels the run instead of reviving it, and says so."""
    home = tmp_path / "home"
    home.mkdir()
    proc, killed_mark = start(tmp_path / "w", one_node(tmp_path), home=home)
    wait_for(proc, ": RUNNING", [])
    proc.kill()
    proc.wait()
    assert marked_processes(killed_mark), "SIGKILL leaves the run's processes behind"
    killed_ray_tmp = Path(json.loads((tmp_path / "w" / "logs" / "session.json").read_text())["ray_tmp"])
    assert killed_ray_tmp.is_dir()
    # A mistake raytune local's own checks cannot see (they read only data on this machine's disk): the job itself
    # fails on it as it reads the data, the cloud's safety net.
    bad = tmp_path / "missing-column.yaml"
    bad.write_text(
        "name: missing-column\nmodel: {id: 'tiny://gemma3', dtype: float32, quantization: none}\n"
        "dataset: {id: 'tiny://products', answer_field: summary}\n"
        "scaling: {nodes: 1, gpus_per_node: 0, max_failures: 2}\ncluster: {dependencies: image}\n"
    )
    again, mark = start(tmp_path / "w", str(bad), "--json", home=home)
    started = time.monotonic()
    out, err = finish(again)
    assert "left RUNNING: now CANCELLED" in err, err[-3000:]
    assert "processes an earlier raytune local of this workdir left" in err
    assert not (left := marked_processes(killed_mark)), processes_text(left)
    assert not (left := emulators.holding(killed_ray_tmp)), processes_text(left)  # a title over the mark
    assert not killed_ray_tmp.exists() and not (tmp_path / "w" / "logs" / "session.json").exists()
    # A dataset without the column fails at once (no max_failures restarts), with the root cause and the log.
    assert out.strip(), f"no record printed (exit {again.returncode}): " + err[-4000:]
    record = json.loads(out)
    assert again.returncode == 1 and record["state"] == "FAILED"
    assert record["reason"].startswith("DataError: dataset tiny://products lacks the column 'summary'")
    assert "driver log: " in record["reason"] and "\x1b[" not in record["reason"]
    assert time.monotonic() - started < 90
    assert not (left := marked_processes(mark)), processes_text(left)


def test_the_operator_commands_on_a_live_local_run(tmp_path):
    """runs, logs, status and cancel on the workdir of a run in progress, as a second terminal would."""
    home = tmp_path / "home"
    home.mkdir()
    workdir = tmp_path / "w"
    # The quickstart trains for 1-2 s: the commands below (a few seconds each) would find it ended. 300 epochs
    # keep it running for minutes, and the cancel ends it.
    config = json.loads(Path(one_node(tmp_path)).read_text())
    config["training"]["epochs"] = 300
    (long := tmp_path / "long.json").write_text(json.dumps(config))
    proc, mark = start(workdir, str(long), home=home)
    wait_for(proc, "  step ", [])

    def raytune(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [RAYTUNE, *args], capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(home)}
        )

    listed = raytune("runs", "--workdir", str(workdir), "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["state"] == "RUNNING" and row["shape"] == "1 x CPU"
    run_id = row["run_id"]
    live_log = raytune("logs", "--workdir", str(workdir), run_id, "--raw")
    assert live_log.returncode == 0 and "Running entrypoint for job" in live_log.stdout, live_log.stderr
    # Ctrl-C while following stops following, not the run: no traceback, how to cancel it, exit 130.
    following = subprocess.Popen(
        [RAYTUNE, "logs", "-f", "--workdir", str(workdir), run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(home)},
    )
    # Ctrl-C once it is following and has told a step (imports done, its handler set), however loaded the machine.
    first, deadline = "", time.monotonic() + 180
    while "  step " not in first and time.monotonic() < deadline:
        ready, _, _ = select.select([following.stdout], [], [], deadline - time.monotonic())
        line = following.stdout.readline() if ready else ""
        if not line:
            break
        first += line
    assert "  step " in first, f"raytune logs -f told no step in 180 s: {first[-2000:]}"
    following.send_signal(signal.SIGINT)
    told, said = following.communicate(timeout=120)
    told = first + told
    assert following.returncode == 130 and "  step " in told, told[-2000:] + said[-2000:]
    assert "Traceback" not in said and f"stopped following {run_id}; the run goes on (RUNNING)" in said, said
    assert f"`raytune cancel {run_id} --workdir {workdir.resolve()}` cancels it" in said
    cancelled = raytune("cancel", "--workdir", str(workdir), run_id, "--timeout", "120")
    assert cancelled.returncode == 0 and f"{run_id}: CANCELLED" in cancelled.stdout, cancelled.stdout + cancelled.stderr
    finish(proc, timeout=120)
    # Recorded as the cancel it was (not an interrupt), and the run's raytune local exits with CANCELLED's code.
    assert proc.returncode == 3 and not marked_processes(mark)
    status = raytune("status", "--workdir", str(workdir), run_id)
    assert "CANCELLED" in status.stdout and "raytune cancel (from another terminal)" in status.stdout, status.stdout
    assert "interrupted" not in status.stdout


def mistaken(tmp_path: Path) -> dict[str, Path]:
    """Three configs with a newcomer's mistakes in their data: a dataset path that does not exist, a JPEG cut short,
    and the answer column under another name."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer import tiny

    def jpeg(image) -> bytes:
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG")
        return buffer.getvalue()

    items = tiny.product_rows(6, seed=4)
    texts = ("Product Name", "Category", "description")
    images = [jpeg(r["image"]) for r in items]
    cut = [*images[:4], images[4][: len(images[4]) * 5 // 6], images[5]]
    for folder, pictures, answer in (("cut", cut, "description"), ("renamed", images, "desc")):
        (tmp_path / folder).mkdir()
        columns = {(answer if k == "description" else k): [r[k] for r in items] for k in texts}
        pq.write_table(pa.table({**columns, "image": pictures}), tmp_path / folder / "data.parquet")
    base = {
        "model": {"id": "tiny://gemma3", "dtype": "float32", "quantization": "none"},
        "scaling": {"gpus_per_node": 0},
    }
    found = {}
    for name, dataset in (
        ("missing", "/nowhere/at/all"),
        ("cut", str(tmp_path / "cut")),
        ("renamed", str(tmp_path / "renamed")),
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**base, "name": name, "dataset": {"id": dataset}}))
        found[name] = path
    return found


@pytest.mark.parametrize(
    ("mistake", "said"),
    [
        ("missing", "dataset.id /nowhere/at/all does not exist on this machine"),
        ("cut", "row 4 (counting from 0; row 4 of data.parquet), column 'image'"),
        ("renamed", "lacks the column 'description' (dataset.answer_field); it has"),
    ],
)
def test_a_mistake_in_the_data_is_caught_before_any_cluster_starts(tmp_path, mistake, said):
    """raytune local runs validate's checks in its own process first (issue 67): validate's line, exit 2, within
    seconds, no Ray started and no FAILED record written."""
    config = mistaken(tmp_path)[mistake]
    workdir = tmp_path / "work"
    started = time.monotonic()
    proc, mark = start(workdir, str(config), home=tmp_path)
    out, err = finish(proc, timeout=120)
    assert proc.returncode == 2, (out, err)
    assert f"error: {config}: " in err and said in err, err
    if mistake == "renamed":
        assert "set dataset.answer_field: desc" in err
    assert time.monotonic() - started < 60, "no cluster was waited for"
    assert not emulators.tagged(mark, variable=MARK) and not (workdir / "records").exists()
    assert "starting the local Ray head" not in out + err
