"""Cloud Storage's IAM in front of fake-gcs-server: each request of the JSON API (and the XML API's object
reads and writes) is mapped to the IAM permissions GCS checks for it (tests/data/iam/README.md: Google's
"IAM permissions for JSON methods" table), and refused with GCS's own 403 body when the caller's roles on
that bucket lack one. Everything else is forwarded unchanged, so the clients under test (google-cloud-storage,
pyarrow's GcsFileSystem, Ray Train's storage) talk to a real GCS implementation with real IAM decisions.

One proxy is one principal (the emulator is anonymous, so who calls is which proxy it calls). Every request is
recorded with the permissions it needed, so a test can also hold that table in functions/core/permissions.py
lists each of them. A request the map does not know is answered 501 and recorded: the map fails closed."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes.http import BackgroundServer

# (IAM resource name, permission) -> allowed? The resource name is the one IAM Conditions see:
# projects/_/buckets/BUCKET for bucket-level checks (objects.list among them), .../objects/NAME for an object's.
Authorizer = Callable[[str, str], bool]


@dataclass(frozen=True)
class Need:
    bucket: str
    permission: str
    on: str  # "bucket" or "object": GCS names the resource in its 403
    name: str | None = None  # the object checked (None: the check is on the bucket)

    @property
    def resource(self) -> str:
        bucket = f"projects/_/buckets/{self.bucket}"
        return bucket if self.name is None else f"{bucket}/objects/{self.name}"

    def __str__(self) -> str:
        return f"{self.permission} on gs://{self.bucket}/{self.name or ''}"


@dataclass(frozen=True)
class Access:
    method: str
    path: str
    needs: tuple[Need, ...]
    denied: Need | None  # the first need refused; None: forwarded
    unmapped: bool = False


def _json_object(body: bytes) -> dict:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _multipart_metadata(body: bytes) -> dict:
    """The JSON part of a multipart/related upload (metadata first, then the media)."""
    start = body.find(b"{")
    end = body.find(b"}\r\n")
    return _json_object(body[start : end + 1]) if start >= 0 and end > start else {}


class _Request:
    def __init__(self, method: str, target: str, body: bytes):
        parts = urlsplit(target)
        self.method = method
        self.segments = [unquote(s) for s in parts.path.split("/")[1:]]
        self.query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.body = body
        self.target = target


class IamGcs(BackgroundServer):
    """A principal's view of GCS: `allowed(resource, permission)` is what its IAM grants (and their conditions)
    say."""

    def __init__(self, upstream: str, principal: str, allowed: Authorizer, policy: Callable[[str], dict] | None = None):
        self.upstream = urlsplit(upstream)
        self.principal = principal
        self.allowed = allowed
        self.policy = policy  # a bucket's allow policy, as GET b/BUCKET/iam answers it (fake-gcs-server keeps none)
        self.accesses: list[Access] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                status, headers, payload = proxy.handle_request(self.command, self.path, dict(self.headers), body)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        super().__init__(Handler)

    # What each request needs ---------------------------------------------------------------------------------

    def _exists(self, bucket: str, name: str) -> bool:
        from urllib.parse import quote

        status, _, _ = self._forward("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}", {}, b"")
        return status == 200

    def _write(self, bucket: str, name: str | None, query: dict[str, str]) -> list[Need]:
        """Creating an object; replacing one needs delete as well (footnote 7 of Google's table), unless the
        request may only create (ifGenerationMatch=0)."""
        needs = [Need(bucket, "storage.objects.create", "object", name)]
        if name and query.get("ifGenerationMatch") != "0" and self._exists(bucket, name):
            needs.append(Need(bucket, "storage.objects.delete", "object", name))
        return needs

    def needs(self, request: _Request) -> list[Need] | None:
        """The permissions GCS checks for this request; None: a request this map does not know."""
        s, q, method = request.segments, request.query, request.method
        acl = q.get("projection") == "full"  # ACLs in the answer: the policy-read permission too
        if s[:3] == ["upload", "storage", "v1"]:
            if len(s) == 6 and s[3] == "b" and s[5] == "o":
                if "upload_id" in q:  # a resumable session's chunk: checked when the session was opened
                    return []
                name = q.get("name")
                if name is None and q.get("uploadType") == "multipart":
                    name = _multipart_metadata(request.body).get("name")
                if name is None and q.get("uploadType") == "resumable":
                    name = _json_object(request.body).get("name")
                return self._write(s[4], name, q)
            return None
        if s[:3] == ["download", "storage", "v1"] and len(s) == 7 and s[3] == "b" and s[5] == "o":
            return [Need(s[4], "storage.objects.get", "object", s[6])]
        if s[:2] == ["storage", "v1"] and len(s) >= 3 and s[2] == "b":
            rest = s[3:]
            if not rest:
                return [Need("", "storage.buckets.list" if method == "GET" else "storage.buckets.create", "bucket")]
            bucket = rest[0]
            if len(rest) == 1:
                permission = {"GET": "storage.buckets.get", "DELETE": "storage.buckets.delete"}.get(
                    method, "storage.buckets.update"
                )
                extra = [Need(bucket, "storage.buckets.getIamPolicy", "bucket")] if acl and method == "GET" else []
                return [Need(bucket, permission, "bucket"), *extra]
            if rest[1:] == ["iam"]:
                return [Need(bucket, f"storage.buckets.{'get' if method == 'GET' else 'set'}IamPolicy", "bucket")]
            if rest[1:] == ["iam", "testPermissions"]:
                return []
            if rest[1] == "o" and len(rest) == 2 and method == "GET":
                extra = [Need(bucket, "storage.objects.getIamPolicy", "object")] if acl else []
                return [Need(bucket, "storage.objects.list", "object"), *extra]
            if rest[1] == "o" and len(rest) == 3:
                name = rest[2]
                if method == "GET":
                    extra = [Need(bucket, "storage.objects.getIamPolicy", "object", name)] if acl else []
                    return [Need(bucket, "storage.objects.get", "object", name), *extra]
                if method == "DELETE":
                    return [Need(bucket, "storage.objects.delete", "object", name)]
                if method in ("PATCH", "PUT"):
                    return [Need(bucket, "storage.objects.update", "object", name)]
            if rest[1] == "o" and len(rest) == 4 and rest[3] == "compose" and method == "POST":
                # (the sources' names are in the body; their reads are checked like the destination's prefix)
                return [Need(bucket, "storage.objects.get", "object", rest[2]), *self._write(bucket, rest[2], q)]
            if rest[1] == "o" and len(rest) == 7 and rest[3] in ("copyTo", "rewriteTo") and method == "POST":
                return [Need(bucket, "storage.objects.get", "object", rest[2]), *self._write(rest[5], rest[6], q)]
            return None
        # The XML API (https://storage.googleapis.com/BUCKET/OBJECT): object reads and writes.
        if len(s) >= 2 and s[0] and s[1]:
            bucket, name = s[0], "/".join(s[1:])
            if method in ("GET", "HEAD"):
                return [Need(bucket, "storage.objects.get", "object", name)]
            if method == "PUT":
                return self._write(bucket, name, {})
            if method == "DELETE":
                return [Need(bucket, "storage.objects.delete", "object", name)]
        return None

    # Answering ---------------------------------------------------------------------------------------------

    def forbidden(self, need: Need, xml: bool) -> tuple[int, list[tuple[str, str]], bytes]:
        """GCS's own 403 (JSON API; the XML API's AccessDenied document for XML requests)."""
        what = "bucket" if need.on == "bucket" else "object"
        message = (
            f"{self.principal} does not have {need.permission} access to the Google Cloud Storage {what}. "
            f"Permission '{need.permission}' denied on resource (or it may not exist)."
        )
        if xml:
            body = (
                "<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                f"<Message>Access denied.</Message><Details>{message}</Details></Error>"
            ).encode()
            return 403, [("Content-Type", "application/xml; charset=UTF-8")], body
        error = {
            "code": 403,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": "forbidden"}],
        }
        return 403, [("Content-Type", "application/json; charset=UTF-8")], json.dumps({"error": error}).encode()

    def handle_request(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        request = _Request(method, target, body)
        if request.segments[:3] == ["storage", "v1", "b"] and request.segments[4:] == ["iam", "testPermissions"]:
            return self.test_permissions(request)
        needs = self.needs(request)
        path = urlsplit(target).path
        if needs is None:
            self._record(Access(method, path, (), None, unmapped=True))
            message = f"tests/fakes/gcs_iam.py does not know which permission {method} {path} needs"
            return 501, [("Content-Type", "text/plain")], message.encode()
        denied = next((n for n in needs if not self.allowed(n.resource, n.permission)), None)
        self._record(Access(method, path, tuple(needs), denied))
        if denied is not None:
            return self.forbidden(denied, xml=not path.startswith(("/storage/", "/upload/", "/download/", "/batch/")))
        bucket_policy = request.segments[:3] == ["storage", "v1", "b"] and request.segments[4:] == ["iam"]
        if self.policy is not None and method == "GET" and bucket_policy:
            answer = json.dumps(self.policy(request.segments[3])).encode()
            return 200, [("Content-Type", "application/json")], answer
        return self._forward(method, target, headers, body)

    def test_permissions(self, request: _Request) -> tuple[int, list[tuple[str, str]], bytes]:
        """buckets.testIamPermissions: which of the asked permissions the caller holds on the bucket (no permission
        needed to ask; 404 for a bucket that does not exist)."""
        from urllib.parse import quote

        bucket = request.segments[3]
        status, headers, payload = self._forward("GET", f"/storage/v1/b/{quote(bucket, safe='')}", {}, b"")
        if status != 200:
            return status, headers, payload
        asked = parse_qs(urlsplit(request.target).query).get("permissions", [])  # repeated: every value
        held = [perm for perm in asked if self.allowed(f"projects/_/buckets/{bucket}", perm)]
        answer = {"kind": "storage#testIamPermissionsResponse", "permissions": held}
        return 200, [("Content-Type", "application/json")], json.dumps(answer).encode()

    def _record(self, access: Access) -> None:
        with self._lock:
            self.accesses.append(access)

    def _forward(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        skip = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
        try:
            connection.request(
                method, target, body=body, headers={k: v for k, v in headers.items() if k.lower() not in skip}
            )
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        # Links the emulator hands out (resumable sessions, media links) must lead back through this proxy.
        ours, theirs = self.url, f"{self.upstream.scheme}://{self.upstream.netloc}"
        answer = []
        for name, value in response.getheaders():
            if name.lower() in ("content-length", "transfer-encoding", "connection"):
                continue
            answer.append((name, value.replace(theirs, ours)))
        if "json" in (response.getheader("Content-Type") or ""):
            payload = payload.replace(theirs.encode(), ours.encode())
        return response.status, answer, payload

    # What tests read ---------------------------------------------------------------------------------------

    def used(self) -> set[tuple[str, str]]:
        """(bucket, permission) of every request that was let through."""
        with self._lock:
            return {(n.bucket, n.permission) for a in self.accesses if a.denied is None for n in a.needs}

    def refused(self) -> list[Access]:
        with self._lock:
            return [a for a in self.accesses if a.denied is not None or a.unmapped]
