"""A Hugging Face Hub stand-in for model downloads, speaking what huggingface_hub's model_info, snapshot_download
and hf_hub_download ask: a revision's commit and files (`/api/models/REPO[/revision/REV]`, `.../tree/REV`), then
each file's
metadata (HEAD) and bytes (GET) under `/REPO/resolve/REV/FILE`. It counts the bytes it serves, and can serve them
at a set rate, to play the Hub's share of a cold start."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from http.server import ThreadingHTTPServer
from urllib.parse import unquote

from tests.fakes.http import JsonHandler, serve_in_thread


class FakeModelHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, repo: str, files: dict[str, bytes], commit: str = "c0ffee" * 6 + "c0ff", rate: float = 0):
        self.repo, self.files, self.commit, self.rate = repo, files, commit, rate  # rate: bytes/s, 0 unbounded
        self.served_bytes = 0
        self.lock = threading.Lock()
        hub = self

        class Handler(JsonHandler):
            def _file(self) -> bytes | None:
                match = re.fullmatch(rf"/{re.escape(hub.repo)}/resolve/([^/]+)/(.+)", unquote(self.path.split("?")[0]))
                if not match or match.group(1) not in ("main", hub.commit) or match.group(2) not in hub.files:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                data = hub.files[match.group(2)]
                self.send_response(200)
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return data

            def do_HEAD(self):
                self._file()

            def do_GET(self):
                path = unquote(self.path.split("?")[0])
                if path in (f"/api/models/{hub.repo}", f"/api/models/{hub.repo}/revision/main") or path == (
                    f"/api/models/{hub.repo}/revision/{hub.commit}"
                ):
                    siblings = [{"rfilename": name, "size": len(data)} for name, data in hub.files.items()]
                    return self.reply(200, {"id": hub.repo, "sha": hub.commit, "siblings": siblings, "private": False})
                if path in (f"/api/models/{hub.repo}/tree/main", f"/api/models/{hub.repo}/tree/{hub.commit}"):
                    entries = [
                        {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                        for name, data in hub.files.items()
                    ]
                    return self.reply(200, entries)
                if path.startswith("/api/"):
                    return self.reply(404, {"error": "Repository not found"})
                data = self._file()
                if data is None:
                    return
                step = 1024 * 1024
                for start in range(0, len(data), step):
                    chunk = data[start : start + step]
                    if hub.rate:
                        time.sleep(len(chunk) / hub.rate)
                    self.wfile.write(chunk)
                    with hub.lock:
                        hub.served_bytes += len(chunk)

        super().__init__(("127.0.0.1", 0), Handler)
        serve_in_thread(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"
