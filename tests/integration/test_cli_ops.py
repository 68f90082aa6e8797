"""The operator commands against the deployed stand-ins: fake-gcs-server buckets, the Pub/Sub emulator
pushing to the functions over HTTP, the Kubernetes fake. submit -> launch -> runs -> status -> logs ->
cancel -> compare, each as a user types it (`raytune ...`)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from functions.adapters.gcs import storage_client
from functions.cli import main as cli
from functions.cli import targets, tokens
from functions.cli.backends import CloudBackend
from functions.cli.settings import CliSettings
from functions.core.allocation import group_name
from functions.core.policy import Policy, cancel_digest
from functions.core.runs import State
from tests.builders import make_run
from tests.fakes.http_events import post, storage_event
from tests.harness import HF_TOKEN
from tests.integration.test_functions import QUICK, wait_for


@pytest.fixture
def deployed(controller, functions_server, pubsub, bucket, tmp_path, monkeypatch):
    """The CLI pointed at the stand-ins: launch and watch topics pushed to the functions."""
    from functions.adapters.pubsub import Publisher

    launch = pubsub.topic("launch")
    pubsub.subscribe(launch, push_endpoint=functions_server["launch"])
    watch = pubsub.topic("watch")
    pubsub.subscribe(watch, push_endpoint=functions_server["watch"])
    settings = CliSettings(
        project="raytune-test",
        runs_bucket=bucket,
        configs_bucket=bucket,
        launch_topic=launch,
        watch_topic=watch,
        node_hour_price="80",  # as Terraform's cli_config carries the deployment's prices
    )
    backend = CloudBackend(settings, platform=controller.ctx.platform, publisher=Publisher())
    monkeypatch.setattr(targets, "backend_for", lambda args: backend)
    monkeypatch.setattr(targets, "deployment_for", lambda args: backend)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # where submit keeps cancel tokens
    # An operator key is set, as Terraform sets one: the CLI (without it) cancels with the run's own token.
    controller.ctx.settings = dataclasses.replace(controller.ctx.settings, policy=Policy(operator_key="o" * 40))
    config = tmp_path / "shop.json"
    config.write_text(json.dumps(QUICK))
    return controller, config, backend


def test_submit_status_logs_cancel_through_the_deployment(deployed, capsys, bucket, functions_server):
    h, config, _ = deployed
    assert cli(["submit", str(config), "--via-topic", "--name", "crm"]) == 0
    run_id = capsys.readouterr().out.strip()
    assert run_id.startswith("crm-")  # the controller's own run id for that message
    record = wait_for(lambda: (r := h.ctx.store.get(run_id)) and r.state == State.SUBMITTED and r)
    assert record.source["kind"] == "message"

    # An upload: the object lands in the configs bucket; Eventarc's event (posted here) launches the same id.
    # --set overrides a field as the schema types it: the uploaded config (and so the record) carries it.
    assert cli(["submit", str(config), "--name", "shop-upload", "--set", "training.epochs=1.5"]) == 0
    uploaded = capsys.readouterr().out.strip()
    blob = storage_client().bucket(bucket).get_blob("configs/shop-upload.json")
    post(
        functions_server["launch"],
        storage_event(bucket, "configs/shop-upload.json", blob.generation, metadata=blob.metadata),
    )
    assert h.ctx.store.get(uploaded).state == State.SUBMITTED
    assert h.ctx.store.get(uploaded).config["training"]["epochs"] == 1.5
    for run in (run_id, uploaded):  # each run's token stays on this machine, only its digest travelled
        kept = tokens.folder() / run
        assert kept.stat().st_mode & 0o777 == 0o600
        assert h.ctx.store.get(run).source["cancel_digest"] == cancel_digest(kept.read_text())

    assert cli(["runs", "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[run_id]["state"] == "SUBMITTED" and rows[run_id]["shape"] == "2 x 8"
    # Issue 40: the estimate made before launch is kept in the record, beside the cost to come.
    assert h.ctx.store.get(run_id).estimate.samples == 1345 * 3 and rows[run_id]["cost"] is None
    assert cli(["runs", "--state", "submitted", "--name", "shop-descriptions"]) == 0
    table = capsys.readouterr().out
    assert run_id in table and uploaded in table and "nodes x GPUs" in table

    h.kube.set_status("rayjobs", run_id, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    for name, labels in (
        ("gemma3-tuning-head-x", {"ray.io/node-type": "head"}),
        ("gemma3-tuning-own-worker", {"ray.io/node-type": "worker", "ray.io/group": group_name(run_id)}),
        ("gemma3-tuning-other-worker", {"ray.io/node-type": "worker", "ray.io/group": group_name("another-run")}),
    ):
        labels = {"ray.io/cluster": "gemma3-tuning", **labels}
        h.kube.put("pods", {"metadata": {"name": name, "labels": labels}, "status": {"phase": "Running"}})
    submitter = f"{run_id}-abcde"
    h.kube.put("pods", {"metadata": {"name": submitter, "labels": {"batch.kubernetes.io/job-name": run_id}}})
    h.kube.logs[("default", submitter)] = (
        "".join(f"driver line {i}\n" for i in range(30))
        + '(RayTrainWorker pid=7) RAYTUNE_PHASE {"phase": "loading the model", "seconds": 0.0}\n'
        + '(RayTrainWorker pid=7) RAYTUNE_PROGRESS {"step": 3, "max_steps": 12, "loss": 1.5, "eta_s": 40}\n'
    )
    assert cli(["status", run_id, "--lines", "3"]) == 0
    status = capsys.readouterr().out
    assert "RayJob     jobStatus            RUNNING" in status and "gemma3-tuning-head-x: Running" in status
    # The run's own pods (the head and its group), not another run's; the end of its story, not raw lines.
    assert "gemma3-tuning-own-worker: Running" in status and "other-worker" not in status, status
    assert "last lines of its story:\n    step 3/12 · loss 1.5000 · ETA 40s" in status, status
    assert "driver line" not in status and "RAYTUNE_" not in status
    assert cli(["logs", run_id, "--raw"]) == 0
    assert capsys.readouterr().out.startswith("driver line 0\n")
    # Issue 40: the run's story, as the foreground raytune local tells it (a phase of 0.0 s says nothing)
    assert cli(["logs", run_id]) == 0
    told = capsys.readouterr().out.splitlines()
    assert told[1] == "  step 3/12 · loss 1.5000 · ETA 40s" and told[0].startswith(f"run {run_id}: SUBMITTED (")
    assert len(told) == 2, told
    h.kube.logs[("default", submitter)] += "\x1b[36m(RayTrainWorker pid=7)\x1b[0m coloured\n"
    assert cli(["logs", run_id, "--raw", "--tail", "2"]) == 0  # the last lines; colours only on a terminal
    assert capsys.readouterr().out.endswith('"eta_s": 40}\n(RayTrainWorker pid=7) coloured\n')

    h.kube.logs[("default", submitter)] += f"HF_TOKEN={HF_TOKEN} leaked by a careless print\n"
    assert cli(["cancel", run_id, "--timeout", "60", "--interval", "0.5"]) == 0
    assert f"{run_id}: CANCELLED" in capsys.readouterr().out
    assert h.kube.get("rayjobs", run_id) is None
    # The ended attempt's driver log is kept in the runs bucket (redacted): `logs` still has it once the
    # submitter pod is gone with the RayJob (Issue 23: "no driver log ... yet" after the end).
    del h.kube.logs[("default", submitter)]
    h.kube.objects.pop(("pods", "default", submitter))
    assert cli(["logs", run_id, "--raw", "--tail", "1"]) == 0
    kept = capsys.readouterr().out
    assert "leaked by a careless print" in kept and HF_TOKEN not in kept
    # Following an ended run tells its story, says once how it ended, and exits with its outcome (3: CANCELLED).
    assert cli(["logs", run_id, "-f"]) == 3
    followed = capsys.readouterr().out
    assert followed.count("CANCELLED") == 1 and f"run {run_id} CANCELLED: " in followed, followed
    assert storage_client().bucket(bucket).get_blob(f"logs/{run_id}/{run_id}.log") is not None

    assert cli(["compare", run_id, uploaded]) == 0
    compared = capsys.readouterr().out
    assert "CANCELLED" in compared and "SUBMITTED" in compared
    assert "training.epochs" in compared and "1.5" in compared, "the override is what differs"

    # retry: the cancelled run's next attempt, through the watch topic with the run's own token
    wait_for(lambda: h.ctx.store.get(run_id).settled)
    assert cli(["retry", run_id, "--timeout", "60", "--interval", "0.5"]) == 0
    assert f"{run_id}: " in capsys.readouterr().out
    retried = wait_for(lambda: (r := h.ctx.store.get(run_id)) and r.state == State.SUBMITTED and r)
    assert retried.attempt == 2 and h.kube.get("rayjobs", f"{run_id}-2") is not None
    assert cli(["status", run_id]) == 0
    status = capsys.readouterr().out
    assert f"attempt 1  RayJob {run_id} (message): CANCELLED" in status
    assert f"attempt 2  RayJob {run_id}-2 (raytune retry): current" in status
    assert cli(["runs", "--state", "submitted"]) == 0
    assert "(attempt 2)" in capsys.readouterr().out
    assert cli(["retry", run_id]) == 2  # a live run is refused here, before anything is sent
    assert "only a FAILED or CANCELLED run can be retried" in capsys.readouterr().err


def test_missing_settings_are_one_clear_line(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAYTUNE_BUCKET", "runs")
    monkeypatch.delenv("RAYTUNE_CONFIGS_BUCKET", raising=False)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(QUICK))
    assert cli(["submit", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: missing setting: RAYTUNE_CONFIGS_BUCKET or configs_bucket in raytune.toml")
    (tmp_path / "raytune.toml").write_text('runs_bucket = "r"\nbucket_typo = 1\n')
    assert cli(["runs"]) == 2
    assert "unknown settings ['bucket_typo']" in capsys.readouterr().err


def test_missing_credentials_are_one_line_not_a_traceback(tmp_path):
    """A fresh machine without `gcloud auth application-default login` (and not on GCE): the real CLI process."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    env = {**keep, "HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "NO_GCE_CHECK": "True"}
    raytune = str(Path(sys.executable).parent / "raytune")
    done = subprocess.run(
        [raytune, "runs", "--bucket", "runs", "--project", "raytune-test"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("error: no Google credentials found") and len(done.stderr.strip().splitlines()) == 1


def test_local_workdirs_are_named_never_guessed_and_submit_never_switches_target(capsys, monkeypatch, tmp_path):
    """Issue 23: `status --local RUN` took RUN for the workdir; `runs --local <typo>` printed an empty table and
    exit 0; `submit` without cloud settings silently ran locally, ignoring --name and --wait."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAYTUNE_BUCKET", "RAYTUNE_CLI_CONFIG", "RAYTUNE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".raytune" / "local-2" / "gcs" / "raytune-local" / "runs").mkdir(parents=True)
    assert cli(["status", "--local", "shop-0123456789"]) == 2  # the run id stays the run id
    err = capsys.readouterr().err
    assert "no raytune local workdir at" in err and ".raytune/local-2 (pass one with --workdir)" in err
    assert cli(["runs", "--workdir", "typo"]) == 2
    assert "no raytune local workdir at" in capsys.readouterr().err
    assert cli(["runs", "--workdir", ".raytune/local-2"]) == 0
    assert cli(["runs"]) == 2
    assert "no raytune local workdir at" in capsys.readouterr().err
    config = tmp_path / "c.json"
    config.write_text(json.dumps(QUICK))
    assert cli(["submit", str(config), "--name", "x", "--wait"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no deployment to submit to: no runs bucket in defaults")
    assert f"to run it here: raytune local {config}" in err
    assert cli(["submit", str(config), "--local", "--name", "x"]) == 2
    assert "--name and --via-topic are the deployment's" in capsys.readouterr().err


def test_submit_prints_the_estimate_and_max_cost_refuses_before_uploading(deployed, capsys, bucket):
    """Issue 40: nothing said what a run would cost before it was launched."""
    _, config, _ = deployed
    assert cli(["submit", str(config), "--name", "dear", "--max-cost", "1"]) == 2
    said = capsys.readouterr().err
    assert "estimate: 2 x 8 x B200 from on-demand" in said and "cost      on-demand: " in said
    assert "not submitted: its upper estimate is" in said and "above 1 (--max-cost; nothing was uploaded)" in said
    assert storage_client().bucket(bucket).get_blob("configs/dear.json") is None
    assert cli(["submit", str(config), "--name", "cheap", "--max-cost", "1000"]) == 0
    assert storage_client().bucket(bucket).get_blob("configs/cheap.json") is not None


def test_runs_of_another_local_workdir_are_found_and_listed(tmp_path, monkeypatch, capsys):
    """Issue 40: `raytune status RUN` of a run in .raytune/local-2 said only "no run"; `runs --all-workdirs` lists
    every local workdir's runs."""
    monkeypatch.chdir(tmp_path)
    for workdir, run_id in ((".raytune/local", "first-0123456789"), (".raytune/local-2", "second-0123456789")):
        local_record(tmp_path / workdir, run_id, State.SUCCEEDED)
    assert cli(["status", "second-0123456789", "--local"]) == 2
    said = capsys.readouterr().err
    assert "no run second-0123456789 in" in said and f"it is in {tmp_path / '.raytune/local-2'}" in said
    assert cli(["status", "second-0123456789", "--workdir", ".raytune/local-2"]) == 0
    capsys.readouterr()
    assert cli(["runs", "--all-workdirs", "--json"]) == 0
    rows = {r["run_id"]: r["workdir"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {
        "first-0123456789": str(tmp_path / ".raytune/local"),
        "second-0123456789": str(tmp_path / ".raytune/local-2"),
    }


def test_ctrl_c_stops_following_even_when_started_with_sigint_ignored(tmp_path):
    """A script's background job (and whatever it starts, a CI runner's tests too) gets SIGINT ignored, and Python
    then never raises KeyboardInterrupt: `raytune logs -f` took no Ctrl-C there and followed on (two CI runs). It
    owns Ctrl-C while it follows, as `raytune local` owns its signals."""
    import fcntl
    import signal
    import threading

    workdir = tmp_path / "w"
    record = local_record(workdir, "live-0123456789", State.RUNNING)
    with open(workdir / ".lock", "w") as lock:  # held, as by the raytune local running it
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write(str(os.getpid()))
        lock.flush()
        raytune = str(Path(sys.executable).parent / "raytune")
        # As a script's shell starts a background job: SIGINT ignored, kept through exec. Not a preexec_fn, which
        # forks this process with gRPC loaded and can abort the child before exec (emulators._killed_with_parent).
        following = subprocess.Popen(
            [
                "sh",
                "-c",
                'trap "" INT; exec "$@"',
                "sh",
                raytune,
                "logs",
                "-f",
                "--workdir",
                str(workdir),
                record.run_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Until it follows: its handler on and its first look at the run printed, however slow its imports (a
        # loaded machine). A Ctrl-C before that look stops it too, but cannot say the state it has not read yet.
        looked: list[str] = []
        reader = threading.Thread(target=lambda: looked.append(following.stdout.readline()), daemon=True)
        reader.start()
        reader.join(60)
        assert looked and looked[0], "it printed nothing of the run it follows"
        assert caught(following.pid, signal.SIGINT)
        following.send_signal(signal.SIGINT)
        _, said = following.communicate(timeout=60)
    assert following.returncode == 130, said
    assert f"stopped following {record.run_id}; the run goes on (RUNNING)" in said


def caught(pid: int, signum: int) -> bool:
    """Whether the process has a handler for the signal (its SigCgt mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (signum - 1)))


def local_record(workdir: Path, run_id: str, state: State):
    """A run record in a local workdir, where fake-gcs-server keeps the bucket."""
    record = make_run(run_id, state).obj()
    runs = workdir / "gcs" / "raytune-local" / "runs"
    runs.mkdir(parents=True)
    (runs / f"{run_id}.json").write_text(record.model_dump_json())
    return record


ROOT = Path(__file__).resolve().parents[2]


def test_the_estimate_prices_the_capacity_the_deployment_gives_in_its_currency(monkeypatch, capsys, tmp_path):
    """Issue 53: examples/cloud.yaml names no reservation (the deployment fixes it): priced as the launch will run
    it, on the policy's reservation at its price, in the deployment's currency; with no deployment settings it says
    what it could not know, not a cost of another capacity."""
    toml = tmp_path / "deployment.toml"
    toml.write_text(
        'project = "p"\nruns_bucket = "r"\nnode_hour_price = "100"\nnode_hour_prices = \'{"reservation": 60}\'\n'
        'price_currency = "EUR"\npolicy_reservation = "team-a4"\n'
    )
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(toml))
    assert cli(["validate", str(ROOT / "examples" / "cloud.yaml")]) == 0
    out = capsys.readouterr().out
    assert "estimate: 2 x 8 x B200 from reservation" in out
    [cost] = [line for line in out.splitlines() if line.strip().startswith("cost")]
    assert cost.strip().startswith("cost      reservation: ") and " EUR (at the deployment's" in cost
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.chdir(tmp_path)
    assert cli(["validate", str(ROOT / "examples" / "cloud.yaml")]) == 0
    out = capsys.readouterr().out
    assert "cost      unknown: no deployment settings" in out and "the capacity is the config's own" in out


def test_validate_says_what_the_launch_would_refuse_judged_by_the_launchs_own_judge(monkeypatch, capsys, tmp_path):
    """Issue 65: validate asks the launch's judge (core/acceptance.py) under the deployment settings it has; the
    refusals are warnings naming those settings, as the deployed function may know more of its policy."""
    toml = tmp_path / "deployment.toml"
    toml.write_text('project = "p"\nruns_bucket = "r"\npolicy_reservation = "team-a4"\n')
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(toml))
    assert cli(["validate", str(ROOT / "examples" / "nightly.yaml")]) == 0
    err = capsys.readouterr().err
    refusals = [line for line in err.splitlines() if "the launch would refuse it" in line]
    assert len(refusals) == 3 and all(f"under {toml}:" in line for line in refusals), err
    assert any("scaling.reservation is fixed to 'team-a4' by the operator" in line for line in refusals)
    assert any("cluster.head_image 'us-central1-docker.pkg.dev/my-project/" in line for line in refusals)
    yours = tmp_path / "nightly.yaml"
    edited = (ROOT / "examples" / "nightly.yaml").read_text().replace("my-project", "p")
    yours.write_text(edited.replace("my-a4-reservation", "team-a4"))
    assert cli(["validate", str(yours)]) == 0
    assert "the launch would refuse it" not in capsys.readouterr().err
    toml.write_text('runs_bucket = "r"\n')  # no project: the launch cannot be judged (it was a RuntimeError)
    assert cli(["validate", str(ROOT / "examples" / "nightly.yaml")]) == 0
    assert "the launch would refuse it" not in capsys.readouterr().err
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.chdir(tmp_path)
    assert cli(["validate", str(ROOT / "examples" / "nightly.yaml")]) == 0  # no deployment: no launch to judge
    assert "the launch would refuse it" not in capsys.readouterr().err


def test_the_summary_says_what_the_trainer_will_do_and_a_cap_is_an_amount(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "none.toml"))
    quick = ROOT / "examples" / "quickstart.json"
    assert cli(["validate", str(quick), "--set", "training.epochs=1"]) == 0
    assert ", 1 epoch" in capsys.readouterr().out
    assert cli(["validate", str(quick), "--set", "training.max_steps=12"]) == 0
    assert ", 12 steps" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        cli(["submit", str(quick), "--max-cost", "-5"])
    assert refused.value.code == 2 and "-5 is not an amount above 0" in capsys.readouterr().err


def on_a_terminal(argv: list[str], columns: int, styles: bool = False, **env: str) -> tuple[int, str]:
    """A command run on a pseudo-terminal `columns` wide, as a person's: its exit code and what the screen got
    (its colour codes too, with `styles`)."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = (
        {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
        | {"TERM": "xterm-256color"}
        | env
    )
    proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command has ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    screen = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return proc.wait(timeout=60), screen if styles else re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_runs_never_cuts_the_run_id_whatever_the_width(tmp_path, columns):
    """Issue 53: the id ("quicksta…") is what every other command takes: other columns go first, and it says so."""
    workdir = tmp_path / "w"
    runs = workdir / "gcs" / "raytune-local" / "runs"
    runs.mkdir(parents=True)
    ids = ["quickstart-3f9c2e71a0b3d58e", "a-longer-config-name-0f1e2d3c4b5a6978"]
    for run_id in ids:
        record = make_run(run_id, State.SUCCEEDED).with_fields(config={"name": run_id.rsplit("-", 1)[0]}).obj()
        (runs / f"{run_id}.json").write_text(record.model_dump_json())
    raytune = str(Path(sys.executable).parent / "raytune")
    code, screen = on_a_terminal([raytune, "runs", "--workdir", str(workdir)], columns)
    assert code == 0, screen
    assert all(run_id in screen for run_id in ids), screen
    table = [line for line in screen.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= columns for line in table), screen
    assert ("not shown; --json has every field" in screen) == (columns < 200), screen


@pytest.mark.parametrize("columns", [80, 200])
def test_compare_never_cuts_a_run_id_whatever_the_width(tmp_path, columns):
    """Issue 67: at 80 columns compare's headings cut the ids; where they do not fit they are named above."""
    workdir = tmp_path / "w"
    runs = workdir / "gcs" / "raytune-local" / "runs"
    runs.mkdir(parents=True)
    ids = ["quickstart-3f9c2e71a0b3d58e", "a-longer-config-name-0f1e2d3c4b5a6978", "quickstart-99aa77bb55cc33dd"]
    for n, run_id in enumerate(ids):
        config = {"name": run_id.rsplit("-", 1)[0], "lora": {"r": 8 * (n + 1)}}
        (runs / f"{run_id}.json").write_text(
            make_run(run_id, State.SUCCEEDED).with_fields(config=config).obj().model_dump_json()
        )
    raytune = str(Path(sys.executable).parent / "raytune")
    code, screen = on_a_terminal([raytune, "compare", *ids, "--workdir", str(workdir)], columns)
    assert code == 0, screen
    assert all(run_id in screen for run_id in ids), screen
    assert all(len(line) <= columns for line in screen.splitlines()), screen
    assert ("A  quickstart-3f9c2e71a0b3d58e  SUCCEEDED" in screen) == (columns == 80), screen


@pytest.mark.parametrize("columns", [80, 120])
def test_permissions_fit_the_terminal_and_stay_one_row_a_line_in_a_pipe(columns):
    """Issue 67: `permissions` printed 190-column rows at any width."""
    raytune = str(Path(sys.executable).parent / "raytune")
    code, screen = on_a_terminal([raytune, "permissions"], columns)
    assert code == 0, screen
    assert all(len(line) <= columns for line in screen.splitlines()), max(screen.splitlines(), key=len)
    assert "functions on bucket:runs" in screen and "  storage.objects.get" in screen
    piped = subprocess.run([raytune, "permissions"], capture_output=True, text=True, check=True).stdout
    assert piped.splitlines()[0].split()[:3] == ["who", "on", "permission"]
    every = [line.split()[:3] for line in piped.splitlines()[1:]]
    # The same permissions, each under its identity and resource.
    told = [line.split()[0] for line in screen.splitlines() if line.startswith("  ") and line[2] != " "]
    assert sorted(told) == sorted(row[2] for row in every)


def test_the_run_it_here_hint_names_the_file_and_its_overrides(capsys, monkeypatch, tmp_path):
    """Issue 53: with --set, the hint named the temporary copy the overrides were written to, gone at exit."""
    monkeypatch.chdir(tmp_path)
    for name in ("RAYTUNE_BUCKET", "RAYTUNE_CLI_CONFIG", "RAYTUNE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(QUICK))
    assert cli(["submit", str(config), "--set", "training.epochs=1"]) == 2
    err = capsys.readouterr().err
    assert f"to run it here: raytune local {config} --set training.epochs=1" in err


def test_a_raw_log_is_coloured_on_a_terminal_unless_no_color_is_set(tmp_path):
    """Issue 53: `logs --raw` kept Ray's colour codes on a terminal whatever NO_COLOR said (https://no-color.org)."""
    workdir = tmp_path / "w"
    (workdir / "gcs" / "raytune-local" / "runs").mkdir(parents=True)
    record = make_run("quick-1", State.SUCCEEDED).with_fields(config={"name": "quick"}).obj()
    (workdir / "gcs" / "raytune-local" / "runs" / "quick-1.json").write_text(record.model_dump_json())
    (workdir / "logs").mkdir()
    (workdir / "logs" / f"{record.job_name}-driver.log").write_text("\x1b[32mINFO\x1b[0m step 1/4\n")
    raytune = str(Path(sys.executable).parent / "raytune")
    argv = [raytune, "logs", "quick-1", "--raw", "--workdir", str(workdir)]
    code, coloured = on_a_terminal(argv, 120, styles=True)
    assert code == 0 and "\x1b[32mINFO" in coloured, coloured
    code, plain = on_a_terminal(argv, 120, styles=True, NO_COLOR="1")
    assert code == 0 and "INFO step 1/4" in plain and "\x1b[" not in plain, plain


def test_status_compare_and_validate_answer_in_json(capsys, monkeypatch, tmp_path):
    """Issue 53: --json on status, compare and validate (and submit), as on runs; a sweep's status shows its trials."""
    from functions.core.result import RunResult, SweepResult, TrialResult

    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "none.toml"))
    workdir = tmp_path / "w"
    runs = workdir / "gcs" / "raytune-local" / "runs"
    runs.mkdir(parents=True)
    trials = [
        TrialResult(trial_id=f"trial-00{n}", params={"lora.r": 4 * 2**n}, state="finished", metric=n + 1.0)
        for n in range(2)
    ]
    sweep = SweepResult(metric="eval_loss", mode="min", best_trial="trial-000", trials=trials)
    for run_id, r in (("a-1", 8), ("b-1", 16)):
        result = RunResult(adapter_path=f"/x/{run_id}", sweep=sweep if run_id == "a-1" else None)
        record = (
            make_run(run_id, State.SUCCEEDED)
            .with_fields(config={"name": run_id[0], "lora": {"r": r}}, result=result)
            .obj()
        )
        (runs / f"{run_id}.json").write_text(record.model_dump_json())
    assert cli(["status", "a-1", "--workdir", str(workdir), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["record"]["run_id"] == "a-1" and status["record"]["state"] == "SUCCEEDED"
    assert cli(["status", "a-1", "--workdir", str(workdir)]) == 0
    shown = capsys.readouterr().out
    assert "2 trials: 2 finished" in shown and "trial-000 *" in shown
    assert cli(["compare", "a-1", "b-1", "--workdir", str(workdir), "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert compared["differing"] == ["lora.r", "name"] and compared["runs"]["b-1"]["config"]["lora.r"] == 16
    assert cli(["validate", str(ROOT / "examples" / "quickstart.json"), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is True and verdict["estimate"]["samples"] == 48


def test_a_retry_of_a_run_that_failed_on_its_data_asks_for_force(capsys, monkeypatch, tmp_path):
    """Issue 53: the retry reran a data error for 90 s without a word."""
    monkeypatch.setenv("RAYTUNE_CLI_CONFIG", str(tmp_path / "none.toml"))
    workdir = tmp_path / "w"
    runs = workdir / "gcs" / "raytune-local" / "runs"
    runs.mkdir(parents=True)
    reason = "PreflightError: dataset /d: row 4 (counting from 0), column 'image': OSError: image file is truncated"
    record = make_run("bad-1", State.FAILED).reason(reason).with_fields(config={"name": "bad"}, settled=True).obj()
    (runs / "bad-1.json").write_text(record.model_dump_json())
    assert cli(["retry", "bad-1", "--workdir", str(workdir)]) == 2
    said = capsys.readouterr().err
    assert "bad-1 failed on PreflightError (PreflightError: dataset /d: row 4" in said and "--force" in said
    assert (
        make_run("r-1", State.FAILED).reason("RuntimeError: NCCL timeout").with_fields(settled=True).obj().fails_again()
        is None
    )
