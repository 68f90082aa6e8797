"""One model download per node: the Ray workers of a pod share HF_HOME on the node's local SSD
(functions/core/manifests.py CACHE_ENV), and huggingface_hub locks each file while one of them downloads
it. Two worker processes fetch the same weights from a Hub stand-in at once: the bytes cross the network
once, and both get the file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from functions.core.manifests import CACHE_ENV
from tests.fakes.http import serve_in_thread

WEIGHTS = os.urandom(8 * 1024 * 1024)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.gets = 0
        self.heads: list[float] = []
        self.download: tuple[float, float] | None = None
        self.served = threading.Event()  # set once the download's end is recorded (the client may finish first)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _headers(self):
                if not self.path.endswith("/resolve/main/model.safetensors"):
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return False
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(WEIGHTS).hexdigest()}"')
                self.send_header("Content-Length", str(len(WEIGHTS)))
                self.end_headers()
                return True

            def do_HEAD(self):
                hub.heads.append(time.monotonic())
                self._headers()

            def do_GET(self):
                if self._headers():
                    hub.gets += 1
                    started = time.monotonic()
                    for start in range(0, len(WEIGHTS), 1024 * 1024):  # slow: the other worker asks meanwhile
                        time.sleep(0.5)
                        self.wfile.write(WEIGHTS[start : start + 1024 * 1024])
                    hub.download = (started, time.monotonic())
                    hub.served.set()

        super().__init__(("127.0.0.1", 0), Handler)


FETCH = """
import sys
from huggingface_hub import hf_hub_download
path = hf_hub_download("google/gemma-3-4b-it", "model.safetensors")
print(len(open(path, "rb").read()))
"""


def test_two_workers_on_a_node_download_the_weights_once(tmp_path):
    hub = FakeHub()
    serve_in_thread(hub)
    scratch = tmp_path / "local-ssd"
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HOME": str(tmp_path),
        # the pod's cache variables, rooted where the node's local SSD would be
        **{k: v.replace("/mnt/local-ssd/", f"{scratch}/") for k, v in CACHE_ENV.items()},
    }
    try:
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", FETCH], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outputs = [w.communicate(timeout=120) for w in workers]
    finally:
        hub.shutdown()
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-2000:]
        assert out.strip() == str(len(WEIGHTS))
    assert hub.gets == 1, f"{hub.gets} downloads for one node"
    # The second worker asked before the one download had ended: it waited on the lock, then used the file.
    assert hub.served.wait(10) and hub.download is not None
    _, ended = hub.download
    assert len(hub.heads) >= 2 and sorted(hub.heads)[1] < ended, (hub.heads, hub.download)
    assert list((scratch / "hf").rglob("model.safetensors"))
