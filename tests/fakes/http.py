"""What the HTTP stand-ins share: a handler that logs nothing and answers JSON, and a server in a thread."""

from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# socketserver looks for shutdown() every poll interval (0.5 s by default): each server a test stopped cost it
# up to half a second, over a hundred tests. A twentieth of a second costs an idle server nothing it notices.
POLL_INTERVAL_S = 0.05


def serve_in_thread(server: socketserver.BaseServer) -> None:
    """Serve `server` from a daemon thread; its shutdown() returns within POLL_INTERVAL_S."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S}, daemon=True).start()


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status: int, body: object) -> None:
        """`body` as JSON (bytes: JSON already encoded)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first: what a hung call's time-out is for (tests/integration/test_invariants.py)


class BackgroundServer(ThreadingHTTPServer):
    """A stand-in served from a thread on a free loopback port."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        super().__init__(("127.0.0.1", 0), handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def start(self):
        serve_in_thread(self)
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
