"""An HTTP fake of the Kubernetes API server, for the real `kubernetes` client.

It speaks the REST protocol the controller uses: namespaced Secrets, ConfigMaps, RayClusters, RayJobs,
Pods and Events at their real paths; GET (objects and label/field-selected lists, whole or their metadata
alone: Accept ...;as=PartialObjectMetadataList), POST (create: 409 AlreadyExists), DELETE (with
resourceVersion preconditions: 409) and PATCH; server-side apply (content type
application/apply-patch+yaml, fieldManager required, strict field validation for ray.io objects
against the KubeRay v1 fields, metadata.resourceVersion as a precondition: 409); JSON patch with
resourceVersion preconditions (409) and test ops (422); Status bodies with real codes; and injected
faults (429/500/409...) per method and path. There are no controllers: tests set RayJob status and
put pods and events themselves.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jsonpatch

from tests.fakes.event_recorder import EventRecorder
from tests.fakes.http import JsonHandler, serve_in_thread
from tests.fakes.kuberay_fields import unknown_fields

PATHS = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[a-z.]+)/(?P<version>v1))(?:/namespaces/(?P<ns>[a-z0-9-]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[a-z0-9.-]+)(?P<log>/log)?)?$"
)
CLUSTER_SCOPED = frozenset(
    {("cloud.google.com", "computeclasses"), ("node.gke.io", "gcpresourceallowlists"), (None, "nodes")}
)  # the rest are namespaced
KINDS = {
    (None, "secrets"): ("v1", "Secret"),
    (None, "configmaps"): ("v1", "ConfigMap"),
    (None, "pods"): ("v1", "Pod"),
    (None, "events"): ("v1", "Event"),
    (None, "nodes"): ("v1", "Node"),
    ("ray.io", "rayclusters"): ("ray.io/v1", "RayCluster"),
    ("ray.io", "rayjobs"): ("ray.io/v1", "RayJob"),
    ("cloud.google.com", "computeclasses"): ("cloud.google.com/v1", "ComputeClass"),  # GKE's, cluster-scoped
    ("node.gke.io", "gcpresourceallowlists"): ("node.gke.io/v1", "GCPResourceAllowlist"),  # GKE's, cluster-scoped
}
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
METADATA_LIST = "PartialObjectMetadataList"
PARTIAL = {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata"}


class _Server(ThreadingHTTPServer):
    # A real API server takes many connections at once; the default backlog of 5 drops SYNs under the
    # watcher's parallel reads and costs each a 1 s retransmit.
    request_queue_size = 128
    daemon_threads = True


class FakeKube:
    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object
        self.requests: list[tuple[str, str, str]] = []  # (method, path, content type; a GET's: what it accepts)
        self.dry_runs: list[dict] = []  # the objects applied with dryRun=All, as the server answered them
        self.authorization: list[str | None] = []  # the Authorization header of each request
        self.faults: list[list] = []  # [method, path part, status, times left]
        self.delays: list[list] = []  # [method, path part, seconds, times left]
        self.logs: dict[tuple[str, str], str | bytes] = {}  # (namespace, pod) -> its log
        self.namespaces: set[str] = {"default"}  # writes elsewhere answer 404, as a real API server does
        # KubeRay writes a new RayCluster's status several times in its first seconds (seen on the real one):
        # with status_churn = N, each of the first N writes to a new RayCluster finds its resourceVersion moved.
        self.status_churn = 0
        self.clock = lambda: dt.datetime.now(dt.UTC)  # creationTimestamp, as the API server sets it
        self._churn: dict[tuple[str, str, str], int] = {}
        self.kuberay_recorder = EventRecorder("raycluster-controller", lambda: self.clock(), self._write_event)
        self._version = 0
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())

    # --- test helpers -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> FakeKube:
        serve_in_thread(self.server)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, method: str, path_part: str, status: int, times: int = 1, message: str | None = None) -> None:
        with self._lock:
            self.faults.append([method, path_part, status, times, message or f"injected fault {status}"])

    def hang(self, method: str, path_part: str, seconds: float, times: int = 1) -> None:
        """Accept the request and answer only after `seconds` (an API server that stalls)."""
        with self._lock:
            self.delays.append([method, path_part, seconds, times])

    def get(self, plural: str, name: str, namespace: str = "default") -> dict | None:
        with self._lock:
            found = self.objects.get((plural, namespace, name))
            return copy.deepcopy(found)

    def names(self, plural: str) -> list[str]:
        with self._lock:
            return sorted(name for (p, _, name) in self.objects if p == plural)

    def set_status(self, plural: str, name: str, status: dict, namespace: str = "default") -> None:
        """What the KubeRay operator would write to the status subresource."""
        with self._lock:
            obj = self.objects[(plural, namespace, name)]
            obj["status"] = {**obj.get("status", {}), **status}
            obj["metadata"]["resourceVersion"] = self._next_version()

    def put(self, plural: str, obj: dict, namespace: str = "default") -> None:
        """An object some other controller made (a pod, an Event). A worker pod of a RayCluster that is Failed is
        what KubeRay acts on at once, as the real operator does (tests/contract/test_realkube.py): it deletes the
        pod, says so in an Event on the RayCluster, and makes a new pod for the group."""
        with self._lock:
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {}).update(namespace=namespace, resourceVersion=self._next_version())
            obj["metadata"].setdefault("creationTimestamp", self._timestamp())
            obj["metadata"].setdefault("uid", str(uuid.uuid4()))
            if plural == "pods" and self._replaced_by_kuberay(obj, namespace):
                return
            self.objects[(plural, namespace, obj["metadata"]["name"])] = obj

    def remove(self, plural: str, name: str, namespace: str = "default") -> None:
        """An object another controller deleted (GKE a node whose VM is gone)."""
        with self._lock:
            self.objects.pop((plural, namespace, name), None)

    def _replaced_by_kuberay(self, pod: dict, namespace: str) -> bool:
        """KubeRay's reconcilePods for an unhealthy worker (shouldDeletePod: a Failed pod): delete, Event, new pod."""
        name = pod["metadata"]["name"]
        cluster = next(
            (
                n
                for (plural, ns, n) in self.objects
                if plural == "rayclusters" and ns == namespace and name.startswith(f"{n}-")
            ),
            None,
        )
        if cluster is None or "-worker-" not in name or (pod.get("status") or {}).get("phase") != "Failed":
            return False
        self.objects.pop(("pods", namespace, name), None)
        restart = (pod.get("spec") or {}).get("restartPolicy", "Never")
        said = f"Deleted worker Pod {namespace}/{name}; Pod status: Failed; Pod restart policy: {restart}; "
        self._kuberay_event(namespace, cluster, "DeletedWorkerPod", said + "Ray container terminated status: nil")
        new = copy.deepcopy(pod)
        new["metadata"].update(
            name=f"{name.rsplit('-', 1)[0]}-{uuid.uuid4().hex[:5]}", resourceVersion=self._next_version()
        )
        new["spec"] = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
        new["status"] = {"phase": "Pending"}
        self.objects[("pods", namespace, new["metadata"]["name"])] = new
        self._kuberay_event(
            namespace, cluster, "CreatedWorkerPod", f"Created worker Pod {namespace}/{new['metadata']['name']}"
        )
        return True

    def _kuberay_event(self, namespace: str, cluster: str, reason: str, message: str) -> dict | None:
        """An Event KubeRay records on a RayCluster, through client-go's recorder (spam filter and aggregation)."""
        uid = self.objects[("rayclusters", namespace, cluster)]["metadata"].get("uid", "")
        involved = {
            "kind": "RayCluster",
            "namespace": namespace,
            "name": cluster,
            "uid": uid,
            "apiVersion": "ray.io/v1",
        }
        return self.kuberay_recorder.record(involved, reason, message)

    def served_runs(self, cluster: str, pods: int, namespace: str = "default") -> None:
        """The worker pods earlier runs had KubeRay create and delete on this RayCluster, each an Event on it."""
        with self._lock:
            for n in range(pods):
                pod = f"{cluster}-earlier-worker-{n:05d}"
                self._kuberay_event(namespace, cluster, "CreatedWorkerPod", f"Created worker Pod {namespace}/{pod}")
                self._kuberay_event(namespace, cluster, "DeletedWorkerPod", f"Deleted Pod {namespace}/{pod}")

    def _write_event(self, name: str, event: dict) -> None:
        namespace = event["involvedObject"]["namespace"]
        stored = {**event, "metadata": {**event["metadata"], "namespace": namespace}}
        stored["metadata"]["resourceVersion"] = self._next_version()
        self.objects[("events", namespace, name)] = stored

    def _timestamp(self) -> str:
        return self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")

    def calls(self, method: str, path_part: str = "") -> int:
        with self._lock:
            return sum(1 for m, p, _ in self.requests if m == method and path_part in p)

    # --- protocol ------------------------------------------------------------------------------
    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _handler(self):
        fake = self

        class Handler(JsonHandler):
            def _status(self, code: int, reason: str | None, message: str) -> None:
                body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
                self.reply(code, {**body, **({"reason": reason} if reason else {}), "code": code})

            def _route(self, method: str) -> None:
                url = urlparse(self.path)
                content_type = self.headers.get("Content-Type", "")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                delay = 0.0
                with fake._lock:
                    for hung in fake.delays:
                        if hung[0] == method and hung[1] in url.path and hung[3] > 0:
                            hung[3] -= 1
                            delay = hung[2]
                            break
                if delay:
                    time.sleep(delay)
                with fake._lock:
                    accepted = self.headers.get("Accept", "") if method == "GET" else content_type
                    fake.requests.append((method, url.path, accepted))
                    fake.authorization.append(self.headers.get("Authorization"))
                    for fault in fake.faults:
                        if fault[0] == method and fault[1] in url.path and fault[3] > 0:
                            fault[3] -= 1
                            return self._status(fault[2], "Injected", fault[4])
                match = PATHS.match(url.path)
                if (
                    not match
                    or (match["group"], match["plural"]) not in KINDS
                    or ((match["group"], match["plural"]) in CLUSTER_SCOPED) != (match["ns"] is None)
                ):
                    return self._status(404, "NotFound", f"the server could not find the requested resource {url.path}")
                key = (match["plural"], match["ns"] or "", match["name"])
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if match["log"]:
                    with fake._lock:
                        text = fake.logs.get((match["ns"], match["name"]))
                    if text is None:
                        return self._status(404, "NotFound", f'pods "{match["name"]}" not found')
                    data = text if isinstance(text, bytes) else text.encode()  # a big log is kept as bytes
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                if method in ("POST", "PATCH") and match["ns"] is not None and match["ns"] not in fake.namespaces:
                    return self._status(404, "NotFound", f'namespaces "{match["ns"]}" not found')
                if match["name"] is None and method == "GET":
                    # as=PartialObjectMetadataList: each item's metadata alone, as the real server answers it
                    method = "LIST_METADATA" if METADATA_LIST in self.headers.get("Accept", "") else "LIST"
                elif (match["name"] is None) != (method == "POST"):
                    return self._status(405, "MethodNotAllowed", f"{method} {url.path}")
                with fake._lock:
                    code, result = getattr(fake, f"_{method.lower()}")(key, match, query, content_type, body)
                if code >= 400:
                    return self._status(code, *result)
                self.reply(code, result)

            def do_GET(self):
                self._route("GET")

            def do_DELETE(self):
                self._route("DELETE")

            def do_PATCH(self):
                self._route("PATCH")

            def do_POST(self):
                self._route("POST")

        return Handler

    def _get(self, key, match, query, content_type, body):
        if key not in self.objects:
            return 404, ("NotFound", f'{key[0]} "{key[2]}" not found')
        return 200, copy.deepcopy(self.objects[key])

    def _list(self, key, match, query, content_type, body):
        api_version, kind = KINDS[(match["group"], match["plural"])]
        return _encoded(api_version, f"{kind}List", self._listed(key, query))

    def _list_metadata(self, key, match, query, content_type, body):
        items = [{**PARTIAL, "metadata": obj["metadata"]} for obj in self._listed(key, query)]
        return _encoded(PARTIAL["apiVersion"], METADATA_LIST, items)

    def _listed(self, key, query) -> list[dict]:
        parts = [part for part in query.get("labelSelector", "").split(",") if part]
        wanted = dict(part.split("=", 1) for part in parts if "=" in part)
        present = [part for part in parts if "=" not in part]  # `key`: the label exists, whatever its value
        fields = dict(part.split("=", 1) for part in query.get("fieldSelector", "").split(",") if part)
        items = []
        for (plural, namespace, _), obj in sorted(self.objects.items()):
            if (plural, namespace) != key[:2]:
                continue
            labels = obj["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in wanted.items()) or any(k not in labels for k in present):
                continue
            if any(_field(obj, path) != v for path, v in fields.items()):
                continue
            items.append(obj)
        return items

    def _post(self, key, match, query, content_type, body):
        obj = json.loads(body)
        key = (key[0], key[1], obj["metadata"]["name"])
        if key in self.objects:
            return 409, ("AlreadyExists", f'{key[0]} "{key[2]}" already exists')
        if match["group"] == "ray.io" and query.get("fieldValidation") == "Strict" and (bad := unknown_fields(obj)):
            kind = obj.get("kind", "object")
            unknown = ", ".join(f'unknown field "{b}"' for b in bad)
            return 400, (
                "BadRequest",
                f'{kind} in version "v1" cannot be handled as a {kind}: strict decoding error: {unknown}',
            )
        if obj["metadata"].get("resourceVersion"):
            return 422, ("Invalid", "metadata.resourceVersion: Invalid value: must be empty on create")
        new = copy.deepcopy(obj)
        new["metadata"].update(
            namespace=key[1],
            uid=str(uuid.uuid4()),
            generation=1,
            resourceVersion=self._next_version(),
            creationTimestamp=self._timestamp(),
        )
        self.objects[key] = new
        if key[0] == "rayclusters":
            self._churn[key] = self.status_churn
        return 201, copy.deepcopy(new)

    def _kuberay_writes_status(self, key) -> None:
        if self._churn.get(key, 0) > 0 and key in self.objects:
            self._churn[key] -= 1
            current = self.objects[key]
            current["status"] = {**current.get("status", {}), "state": "ready"}
            current["metadata"]["resourceVersion"] = self._next_version()

    def _delete(self, key, match, query, content_type, body):
        self._kuberay_writes_status(key)
        options = json.loads(body) if body else {}
        wanted = (options.get("preconditions") or {}).get("resourceVersion")
        current = self.objects.get(key)
        if current is None:
            return 404, ("NotFound", f'{key[0]} "{key[2]}" not found')
        if wanted and current["metadata"]["resourceVersion"] != wanted:
            return 409, (
                "Conflict",
                f"Precondition failed: ResourceVersion in precondition: {wanted}, in object meta: {current['metadata']['resourceVersion']}",
            )
        del self.objects[key]
        return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": key[2]}}

    def _patch(self, key, match, query, content_type, body):
        self._kuberay_writes_status(key)
        if content_type == APPLY:
            return self._apply(key, match, query, body)
        if content_type == JSON_PATCH:
            return self._json_patch(key, query, body)
        return 415, ("UnsupportedMediaType", f"unsupported patch type {content_type!r}")

    def _apply(self, key, match, query, body):
        if not query.get("fieldManager"):
            return 400, ("BadRequest", "PATCH requests for apply must include fieldManager")
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as err:
            return 400, ("BadRequest", f"error decoding YAML: {err}")
        api_version, kind = KINDS[(match["group"], match["plural"])]
        meta = obj.get("metadata", {})
        if (obj.get("apiVersion"), obj.get("kind")) != (api_version, kind):
            return 400, (
                "BadRequest",
                f"apiVersion/kind {obj.get('apiVersion')}/{obj.get('kind')} does not match the path",
            )
        if meta.get("name") != key[2] or meta.get("namespace", key[1]) != key[1]:
            return 400, ("BadRequest", "the name or namespace of the object does not match the path")
        if match["group"] == "ray.io" and (bad := unknown_fields(obj)):
            # As the real server: a field the schema does not declare fails to type the patch, a 500 whatever
            # fieldValidation says, with no reason (tests/contract/test_realkube.py shows it on both).
            return 500, (
                None,
                f"failed to create typed patch object ({key[1]}/{key[2]}; {api_version}, Kind={kind}): .{bad[0]}: field not declared in schema",
            )
        current = self.objects.get(key)
        precondition = meta.get("resourceVersion")
        if precondition and (current is None or current["metadata"]["resourceVersion"] != precondition):
            return 409, ("Conflict", "the object has been modified; please apply your changes to the latest version")
        if current is not None and query.get("force") != "true":
            return 409, ("Conflict", "Apply failed with conflicts (force not set)")
        new = copy.deepcopy(obj)
        new["metadata"] = {**(current or {}).get("metadata", {}), **meta}
        if query.get("dryRun") == "All":  # validated as a real apply, stored nowhere
            self.dry_runs.append(copy.deepcopy(new))
            return (200 if current is not None else 201), new
        if current is not None and "status" in current:
            new["status"] = current["status"]
        if current is None:
            new["metadata"].update(
                uid=str(uuid.uuid4()),
                generation=1,
                resourceVersion=self._next_version(),
                creationTimestamp=self._timestamp(),
            )
            self.objects[key] = new
            return 201, copy.deepcopy(new)
        if _content(new) != _content(current):  # a no-op apply changes nothing, not even the version
            new["metadata"]["resourceVersion"] = self._next_version()
            new["metadata"]["generation"] = current["metadata"]["generation"] + 1
            self.objects[key] = new
        return 200, copy.deepcopy(self.objects[key])

    def _json_patch(self, key, query, body):
        current = self.objects.get(key)
        if current is None:
            return 404, ("NotFound", f'{key[0]} "{key[2]}" not found')
        try:  # RFC 6902 as the real server applies it (a failed test op and a missing path are both a 422)
            new = jsonpatch.apply_patch(current, json.loads(body))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
            # The real server says no more (tests/contract/test_kube_servers.py holds both to it).
            return 422, ("Invalid", "the server rejected our request due to an error in our request")
        if new["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            return 409, ("Conflict", "the object has been modified; please apply your changes to the latest version")
        strict = query.get("fieldValidation") == "Strict"
        if strict and key[0] in ("rayclusters", "rayjobs") and (bad := unknown_fields(new)):
            unknown = ", ".join(f'unknown field "{b}"' for b in bad)
            said = json.dumps(new).replace('"', '\\"')
            return 422, ("Invalid", f'"" is invalid: patch: Invalid value: "{said}": strict decoding error: {unknown}')
        if _content(new) != _content(current):
            new["metadata"]["resourceVersion"] = self._next_version()
            new["metadata"]["generation"] = current["metadata"]["generation"] + 1
            self.objects[key] = new
        return 200, copy.deepcopy(self.objects[key])


def _encoded(api_version: str, kind: str, items: list[dict]) -> tuple[int, bytes]:
    # encoded here, under the lock, rather than copied for the reply to encode (a list of a thousand RayJobs)
    return 200, json.dumps({"apiVersion": api_version, "kind": kind, "metadata": {}, "items": items}).encode()


def _field(obj: dict, path: str):
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _content(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "generation")}
    return {**obj, "metadata": meta}
