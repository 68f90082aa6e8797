#!/usr/bin/env python3
"""A tiny fake of the Ray Jobs REST API (the part KubeRay calls), for every RayCluster at once.

The KubeRay operator reaches a cluster's dashboard at http://<head svc>.<namespace>.svc.cluster.local:8265
with Go's default HTTP transport, which honours HTTP_PROXY. up.sh starts the operator with HTTP_PROXY
pointing here (127.0.0.1 only), so each request arrives with an absolute URL whose host names the
cluster's head Service. Nothing is ever forwarded anywhere.

A dashboard answers only while its head is "up" (kubelet.py marks it up when it makes the head pod Ready,
down when the pod goes); otherwise the connection is closed without an answer, as a refused connection
would be for the operator.

Control API (plain requests to http://127.0.0.1:PORT/-/...), used by kubelet.py and the drivers:
  GET  /-/healthz
  GET  /-/state                                  every head and job
  POST /-/heads/<ns>/<svc>    {"up": true|false}
  POST /-/submit/<ns>/<svc>   {"submission_id", "entrypoint", "runtime_env"?, "metadata"?}  (the submitter)
  POST /-/jobs/<ns>/<svc>/<id> {"status": "RUNNING"|"SUCCEEDED"|"FAILED"|"STOPPED", "message"?}
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
LOCK = threading.Lock()
STATE: dict = {"heads": {}, "jobs": {}, "requests": []}  # jobs: "ns/svc" -> {id: info}
STATE_FILE: str | None = None


def now_ms() -> int:
    return int(time.time() * 1000)


def save() -> None:
    if STATE_FILE:
        with open(STATE_FILE + ".tmp", "w") as f:
            json.dump(STATE, f, indent=1, sort_keys=True)
        import os

        os.replace(STATE_FILE + ".tmp", STATE_FILE)


def set_status(info: dict, status: str, message: str = "") -> None:
    if info["status"] in TERMINAL:
        return
    info["status"] = status
    info["message"] = message or {
        "PENDING": "Job has not started yet.",
        "RUNNING": "Job is currently running.",
        "SUCCEEDED": "Job finished successfully.",
        "FAILED": "Job failed.",
        "STOPPED": "Job was intentionally stopped.",
    }.get(status, "")
    if status == "RUNNING" and not info.get("start_time"):
        info["start_time"] = now_ms()
    if status in TERMINAL:
        info.setdefault("start_time", now_ms())
        info["end_time"] = now_ms()


def new_job(submission_id: str, entrypoint: str, runtime_env=None, metadata=None) -> dict:
    return {
        "job_id": None,
        "submission_id": submission_id,
        "entrypoint": entrypoint,
        "status": "PENDING",
        "message": "Job has not started yet.",
        "start_time": now_ms(),
        "end_time": None,
        "metadata": metadata or {},
        "runtime_env": runtime_env or {},
        "type": "SUBMISSION",
        "driver_info": None,
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet; requests are counted in STATE
        pass

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def _send(self, code: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(2)
        except OSError:
            pass

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def do_PUT(self):
        self._route("PUT")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        if not url.netloc and url.path.startswith("/-/"):
            return self._control(method, url.path[3:].strip("/").split("/"))
        host = (url.hostname or (self.headers.get("Host") or "").split(":")[0]).lower()
        parts = host.split(".")
        if len(parts) < 3 or parts[2] != "svc":
            return self._send(400, {"error": f"not a cluster service host: {host!r}"})
        key = f"{parts[1]}/{parts[0]}"
        body = self._body() if method in ("POST", "PUT") else {}
        with LOCK:
            STATE["requests"].append([round(time.time(), 3), method, key, url.path])
            del STATE["requests"][:-200]
            if not STATE["heads"].get(key):
                self._refuse()
                return
            jobs = STATE["jobs"].setdefault(key, {})
            code, reply = self._ray_api(method, url.path, body, jobs)
            save()
        self._send(code, reply)

    @staticmethod
    def _ray_api(method: str, path: str, body: dict, jobs: dict):
        if path.rstrip("/") == "/api/version":
            return 200, {"version": "4", "ray_version": "2.x-fake", "ray_commit": "fake"}
        if path.startswith("/api/serve/"):
            return 200, {"applications": {}}
        if not path.startswith("/api/jobs"):
            return 404, {"error": "not found"}
        rest = path[len("/api/jobs") :].strip("/")
        if not rest:
            if method == "GET":
                return 200, list(jobs.values())
            if method == "POST":  # HTTPMode submission
                sid = body.get("submission_id") or f"raysubmit_{now_ms()}"
                if sid in jobs:
                    return 500, {
                        "error": f"Job with submission_id {sid} already exists. Please use a different submission_id."
                    }
                jobs[sid] = new_job(sid, body.get("entrypoint", ""), body.get("runtime_env"), body.get("metadata"))
                return 200, {"job_id": sid, "submission_id": sid}
            return 405, {}
        job_id, _, action = rest.partition("/")
        info = jobs.get(job_id)
        if info is None:
            return 404, {"error": f"Job {job_id} does not exist"}
        if action == "" and method == "GET":
            return 200, info
        if action == "" and method == "DELETE":
            if info["status"] not in TERMINAL:
                return 400, {"error": "job is not terminal"}
            del jobs[job_id]
            return 200, {"deleted": True}
        if action == "stop" and method == "POST":
            stopped = info["status"] not in TERMINAL
            set_status(info, "STOPPED")
            return 200, {"stopped": stopped}
        if action == "logs" and method == "GET":
            return 200, {"logs": f"fake driver log of {job_id}: status {info['status']}\n"}
        return 404, {"error": "not found"}

    def _control(self, method: str, parts: list[str]) -> None:
        body = self._body() if method == "POST" else {}
        with LOCK:
            if parts == ["healthz"]:
                return self._send(200, {"ok": True})
            if parts == ["state"]:
                return self._send(200, STATE)
            if len(parts) == 3 and parts[0] == "heads" and method == "POST":
                key = f"{parts[1]}/{parts[2]}"
                STATE["heads"][key] = bool(body.get("up", True))
                if not STATE["heads"][key]:
                    STATE["jobs"].pop(key, None)  # a new head starts with an empty job table
                save()
                return self._send(200, {"head": key, "up": STATE["heads"][key]})
            if len(parts) == 3 and parts[0] == "submit" and method == "POST":
                key = f"{parts[1]}/{parts[2]}"
                jobs = STATE["jobs"].setdefault(key, {})
                sid = body["submission_id"]
                if sid in jobs:
                    return self._send(409, {"error": f"submission {sid} exists", "job": jobs[sid]})
                jobs[sid] = new_job(sid, body.get("entrypoint", ""), body.get("runtime_env"), body.get("metadata"))
                save()
                return self._send(200, jobs[sid])
            if len(parts) == 4 and parts[0] == "jobs" and method == "POST":
                key = f"{parts[1]}/{parts[2]}"
                info = STATE["jobs"].get(key, {}).get(parts[3])
                if info is None:
                    return self._send(404, {"error": "no such job"})
                set_status(info, body["status"], body.get("message", ""))
                save()
                return self._send(200, info)
        self._send(404, {"error": "unknown control path"})


def main() -> None:
    global STATE_FILE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=18265)
    ap.add_argument("--state", default=None, help="JSON file mirroring the state (for reading only)")
    args = ap.parse_args()
    STATE_FILE = args.state
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
