"""An ended attempt's driver log is kept in the bucket, cut to its last 8 MiB and redacted, by the watcher, whose
function has 512 MiB: a log of any size is read streaming, cut first and redacted a piece at a time. Here a 200 MiB
log, read through the real `kubernetes` client from the API fake, in a process held to 512 MiB of data."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from functions.core import joblog
from tests.fakes.kube import FakeKube

TOKEN = "hf_" + "Q" * 34
LINE = b"(RayTrainWorker pid=1234, ip=10.0.0.7) step 100/4000 loss 1.2345 grad_norm 0.98 lr 2e-4 tokens/s 81234.5\n"
WATCHER = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_DATA, (512 << 20, 512 << 20))  # the watcher function's memory
    from functions.adapters.kube import Kube, api_client
    from functions.core import joblog
    from functions.core.secrets import redact_log
    started = time.process_time()
    text = Kube(api_client(sys.argv[1])).job_log("default", "run-1", joblog.KEPT_LOG_BYTES)
    kept = redact_log(text)
    print(json.dumps({
        "cpu_s": time.process_time() - started,
        # VmHWM: this process's own peak (ru_maxrss keeps the forking test process's across exec)
        "max_rss_mib": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024,
        "chars": len(kept), "head": kept[:200], "tail": kept[-200:], "token": sys.argv[2] in kept,
        "redacted": kept.count("[REDACTED]"),
    }))
    """
)


@pytest.fixture
def fake():
    server = FakeKube().start()
    yield server
    server.stop()


def test_a_200_mib_log_is_kept_cut_and_redacted_within_the_watchers_memory(fake):
    size = 200 << 20
    body = bytearray(LINE * (size // len(LINE)))
    body[:40] = b"early token " + TOKEN.encode() + b" gone\n"[: 40 - 12 - len(TOKEN)]  # cut away with the head
    # a token sitting on the 8 MiB cut: its line is dropped whole, never a fragment of it kept
    cut = len(body) - joblog.KEPT_LOG_BYTES
    body[cut - 10 : cut + 30] = (b"xx " + TOKEN.encode())[:40].ljust(40, b"y")
    body += b"HF_TOKEN=" + TOKEN.encode() + b"\nlast line\n"
    fake.put(
        "pods",
        {"metadata": {"name": "run-1-abcde", "labels": {"batch.kubernetes.io/job-name": "run-1"}}, "status": {}},
    )
    fake.logs[("default", "run-1-abcde")] = bytes(body)
    del body
    out = subprocess.run(
        [sys.executable, "-c", WATCHER, fake.url, TOKEN], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    print(f"200 MiB log: {seen['cpu_s']:.2f} CPU-s, peak RSS {seen['max_rss_mib']:.0f} MiB")
    assert not seen["token"] and seen["redacted"] == 1  # only the token in the last 8 MiB, redacted
    assert seen["tail"].endswith("HF_TOKEN=[REDACTED]\nlast line\n")
    assert seen["head"].startswith(LINE.decode()[:40]) and "QQQQ" not in seen["head"]  # starts at a whole line
    assert joblog.KEPT_LOG_BYTES - 2 * len(LINE) <= seen["chars"] <= joblog.KEPT_LOG_BYTES
    assert seen["max_rss_mib"] < 160, seen  # streaming: the imports' ~80 MiB and a few times the kept 8 MiB
