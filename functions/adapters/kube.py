"""Kubernetes adapter: server-side apply of our objects and the RayJob/RayCluster calls the controller needs.

Driven by the official `kubernetes` client (imported lazily). Every call retries transient errors
(429, 5xx, dropped connections); a 409 on a scale patch means someone changed the RayCluster since it
was read, and is reported to the caller instead of being retried here. Client exceptions leave this
module as functions.core.errors, with the API's own message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from functions.adapters.cluster_specs import ClusterSpecs
from functions.adapters.retry import with_retries
from functions.core import errors, joblog
from functions.core.manifests import (
    ALLOCATION_ANNOTATION,
    BASE_ANNOTATION,
    MANAGED_BY,
    OWNER_LABEL,
    WORKER_GROUPS,
    group_ops,
)

FIELD_MANAGER = "raytune"
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
RAY_GROUP, RAY_VERSION = "ray.io", "v1"
PLURALS = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}


STAMP = ALLOCATION_ANNOTATION


@dataclass(frozen=True)
class RayClusterSeen:
    groups: list[dict[str, Any]]  # spec.workerGroupSpecs as read
    resource_version: str  # the RayCluster's, read together with the groups: every write's precondition
    stamp: int
    annotated: bool  # the RayCluster has metadata.annotations (a JSON patch can add the stamp to it)
    managed: bool  # it carries the controller's label: never change another team's RayCluster
    owner: str | None = None  # the deployment label's value (manifests.OWNER_LABEL), None when unlabelled
    base: str | None = None  # its manifests.BASE_ANNOTATION: what it was last applied with, groups left out
    stamped: bool = False  # it carries the allocation stamp (what the controller's writes are conditional on)
    ready: bool = True  # KubeRay's status says `ready` (never taken back once written)

    @classmethod
    def of(cls, found: dict[str, Any]) -> RayClusterSeen:
        """A RayCluster as read or listed: its worker groups and what every write to them is conditional on."""
        labels = found["metadata"].get("labels") or {}
        annotations = found["metadata"].get("annotations") or {}
        return cls(
            list(found["spec"].get("workerGroupSpecs") or []),
            found["metadata"]["resourceVersion"],
            stamp_of(found),
            "annotations" in found["metadata"],
            MANAGED_BY.items() <= labels.items(),
            labels.get(OWNER_LABEL),
            annotations.get(BASE_ANNOTATION),
            STAMP in annotations,
            (found.get("status") or {}).get("state") == "ready",
        )


def stamp_of(obj: dict[str, Any]) -> int:
    value = (obj["metadata"].get("annotations") or {}).get(STAMP, "0")
    return int(value) if str(value).isdigit() else 0


def api_client(host: str, token: Callable[[], str] | None = None, ca_file: str | None = None) -> Any:
    """A kubernetes ApiClient for `host`; `token` is asked for a bearer token on every request
    (GKE access tokens expire after an hour: the source caches and refreshes them)."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = host
    if token:
        configuration.api_key = {"authorization": f"Bearer {token()}"}
        configuration.refresh_api_key_hook = lambda conf: conf.api_key.update(authorization=f"Bearer {token()}")
    if ca_file:
        configuration.ssl_ca_cert = ca_file
    configuration.retries = 0  # retries are ours (with_retries), not urllib3's
    configuration.connection_pool_maxsize = 32  # the watcher reads RayJobs from many threads at once
    return client.ApiClient(configuration)


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


URLLIB3_TRANSIENT = frozenset(
    {
        "MaxRetryError",
        "NewConnectionError",
        "ProtocolError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "TimeoutError",
        "SSLError",
    }
)


# A server-side apply of a field the installed CRD does not declare: the API server answers 500 (not 400,
# whatever fieldValidation says), and the same apply fails the same way every time (tests/contract/test_realkube.py).
UNDECLARED = re.compile(r"failed to create typed patch object \(([^)]*)\): (\S+): field not declared in schema")
# A JSON patch (fieldValidation=Strict) whose result has such a field: a 422 whose message quotes the whole
# object patched, then names the fields (tests/contract/test_kube_servers.py shows it on both).
UNKNOWN = re.compile(r'strict decoding error: ((?:unknown field "[^"]+"(?:, )?)+)$')


def translate(exc: Exception) -> Exception:
    """kubernetes ApiException (status and a Status body) and urllib3 errors as functions.core.errors."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        message = _message(exc)
        if message and (undeclared := UNDECLARED.search(message)):
            what, field = undeclared.groups()
            return _unknown_to_crd(f"{field} ({what})", message, _status(exc))
        if message and (unknown := UNKNOWN.search(message)):
            fields = ", ".join("." + f for f in re.findall(r'unknown field "([^"]+)"', unknown.group(1)))
            return _unknown_to_crd(fields, unknown.group(0), _status(exc))
        return errors.from_status(_status(exc), message or getattr(exc, "reason", None) or str(exc))
    if type(exc).__name__ in URLLIB3_TRANSIENT:
        return errors.TransientError(f"{type(exc).__name__}: {exc}")
    return exc


# What the API server answers a JSON patch it cannot apply (a test op that fails, a path that is not there), and
# nothing more: 422, this message, no details (tests/contract/test_kube_servers.py).
PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"


def _body(exc: Exception) -> str:
    """An API error's body as text (the client keeps bytes or str)."""
    body = getattr(exc, "body", None) or ""
    return body.decode(errors="replace") if isinstance(body, bytes) else str(body)


def _message(exc: Exception) -> str | None:
    """The message of an API error's Status body; None when the body is not one."""
    try:
        message = json.loads(_body(exc) or "{}").get("message")
    except (TypeError, ValueError, AttributeError):
        return None
    return message if isinstance(message, str) else None


def _not_applied(exc: Exception) -> bool:
    return _status(exc) == 422 and _message(exc) == PATCH_NOT_APPLIED


def _unknown_to_crd(fields: str, said: str, status: int | None) -> errors.PermanentError:
    """A field the cluster's CRD does not declare: GKE's own CRD (older than the GKE raytune renders for) where the
    kind is one of GKE's, else KubeRay's."""
    gke = next((kind for kind in GKE_KINDS if f"Kind={kind}" in fields), None)
    if gke is not None:
        return errors.PermanentError(
            f"the cluster's {gke} CRD (GKE's own) does not know {fields}: the cluster's GKE version is older "
            f"than the one raytune renders for ({GKE_KINDS[gke].gke}); the API said: " + said,
            status,
        )
    return errors.PermanentError(
        f"the cluster's KubeRay does not know {fields}: its CRD is older than the one raytune renders for (upgrade "
        "the Ray operator add-on, or the cluster's GKE version); the API said: " + said,
        status,
    )


@dataclass(frozen=True)
class GkeKind:
    """One of GKE's own (cluster-scoped) kinds a launch applies."""

    plural: str
    crd: str  # its CRD's name
    needed_by: str  # the config field whose runs render it
    gke: str  # the GKE that installs its CRD


GKE_KINDS = {
    # https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes; terraform/gke.tf's
    # release channel has it.
    "ComputeClass": GkeKind(
        "computeclasses",
        "computeclasses.cloud.google.com",
        "scaling.capacity",
        "custom compute classes need GKE 1.30.3-gke.1451000 or later on Autopilot",
    ),
    # https://cloud.google.com/kubernetes-engine/docs/how-to/data-container-image-preloading
    "GCPResourceAllowlist": GkeKind(
        "gcpresourceallowlists",
        "gcpresourceallowlists.node.gke.io",
        "cluster.image_cache",
        "secondary boot disks need GKE 1.30.1-gke.1329000 or later on Autopilot",
    ),
}
# What a server-side apply of a kind whose CRD is not installed answers (404, no such resource type), as opposed to
# a missing namespace ('namespaces "x" not found').
NO_SUCH_TYPE = "the server could not find the requested resource"
MISSING_CRD = {
    **{
        kind: f"the cluster has no {kind} CRD ({k.crd}), which {k.needed_by} needs: {k.gke} (raytune doctor checks a "
        "cluster)"
        for kind, k in GKE_KINDS.items()
    },
    **{
        kind: f"the cluster has no KubeRay CRD for {kind} ({plural}.ray.io): enable the Ray operator add-on "
        "(gcloud container clusters update CLUSTER --update-addons=RayOperator=ENABLED; raytune doctor checks it)"
        for kind, plural in PLURALS.items()
    },
}


def _missing_crd(kind: str, exc: Exception) -> errors.PermanentError | None:
    """A 404 to an apply of a custom kind whose type the server does not serve: its CRD is missing."""
    if _status(exc) != 404 or kind not in MISSING_CRD:
        return None
    said = _body(exc)
    if NO_SUCH_TYPE not in said and "404 page not found" not in said:
        return None
    return errors.PermanentError(MISSING_CRD[kind], 404)


# Every call has connect and read timeouts: an API server that accepts and never answers must not hold a
# handler until the platform kills it.
TIMEOUT_S = (5.0, 20.0)


class Kube:
    def __init__(
        self,
        api_client: Any,
        on_unauthorized: Callable[[], None] | None = None,
        timeout_s: tuple[float, float] = TIMEOUT_S,
    ):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.on_unauthorized = on_unauthorized
        self.timeout_s = timeout_s
        self.cluster_specs = ClusterSpecs()

    def _send(self, call: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """One API call with timeouts. 401/403 refresh the credentials and try once more before anything is
        decided (a token can expire between two calls); 404 is None when `missing_ok`."""
        from kubernetes.client.exceptions import ApiException

        for attempt in (1, 2):
            try:
                return call(*args, _request_timeout=self.timeout_s, **kwargs)
            except ApiException as exc:
                if exc.status == 404 and missing_ok:
                    return None
                if exc.status in (401, 403) and attempt == 1 and self.on_unauthorized is not None:
                    self.on_unauthorized()
                    continue
                raise
        raise AssertionError("unreachable")

    def apply(self, obj: dict[str, Any], resource_version: str | None = None, dry_run: bool = False) -> bool:
        """Server-side apply (creates or updates; force: our field manager owns what it applies). Given
        `resource_version`, only if the object is still at it: False when it changed or went meanwhile. A dry run
        is validated and admitted by the server as the real one would be, and stored nowhere."""
        kind, meta = obj["kind"], obj["metadata"]
        if resource_version is not None:
            obj = {**obj, "metadata": {**meta, "resourceVersion": resource_version}}
        common: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "field_validation": "Strict",
            "_content_type": APPLY,
            "_preload_content": False,  # the object as applied is not needed: no JSON decode nor model build
            **({"dry_run": "All"} if dry_run else {}),
        }
        args: tuple[Any, ...]
        if kind in GKE_KINDS:  # cluster-scoped, GKE's own API groups
            group, version = obj["apiVersion"].split("/")
            plural = GKE_KINDS[kind].plural
            call, args = self.custom.patch_cluster_custom_object, (group, version, plural, meta["name"], obj)
        elif kind == "Secret":
            call, args = self.core.patch_namespaced_secret, (meta["name"], meta["namespace"], obj)
        elif kind == "ConfigMap":
            call, args = self.core.patch_namespaced_config_map, (meta["name"], meta["namespace"], obj)
        else:
            call = self.custom.patch_namespaced_custom_object
            args = (RAY_GROUP, RAY_VERSION, meta["namespace"], PLURALS[kind], meta["name"], obj)

        def send() -> bool:
            try:
                self._send(call, *args, **common)
            except Exception as exc:
                if resource_version is not None and self._lost_race(exc, kind, meta, resource_version):
                    return False
                if (missing := _missing_crd(kind, exc)) is not None:
                    raise missing from exc
                raise
            return True

        where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        return with_retries(send, f"apply {kind} {where}", translate=translate)

    def _lost_race(self, exc: Exception, kind: str, meta: dict[str, Any], resource_version: str) -> bool:
        """Whether a conditional write failed because the object changed or went since it was read (409, or
        404/422 for a vanished object), as opposed to being refused for what it says."""
        if _status(exc) == 409:
            return True
        if _status(exc) not in (404, 422):
            return False
        current = self._get(kind, meta["namespace"], meta["name"])
        return current is None or current["metadata"].get("resourceVersion") != resource_version

    def _conditional(
        self,
        call: Callable[[], Any],
        what: str,
        lost: tuple[int, ...] = (409,),
        moved: Callable[[], bool] | None = None,
    ) -> bool:
        """A write with a precondition: False when the object changed (or exists) meanwhile (given `moved`, also a
        JSON patch the server could not apply to an object that `moved()` says changed since read), with retries
        for transient errors; anything else raises."""

        def send() -> bool:
            try:
                call()
            except Exception as exc:
                if _status(exc) in lost or (moved is not None and _not_applied(exc) and moved()):
                    return False
                raise
            return True

        return with_retries(send, what, translate=translate)

    def create(self, obj: dict[str, Any]) -> bool:
        """Create a ray.io object; False when it already exists (someone else created it first)."""
        meta = obj["metadata"]
        return self._conditional(
            lambda: self._send(
                self.custom.create_namespaced_custom_object,
                RAY_GROUP,
                RAY_VERSION,
                meta["namespace"],
                PLURALS[obj["kind"]],
                obj,
                field_manager=FIELD_MANAGER,
                field_validation="Strict",
                _preload_content=False,
            ),
            f"create {obj['kind']} {meta['namespace']}/{meta['name']}",
        )

    def _get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return with_retries(
            lambda: self._send(
                self.custom.get_namespaced_custom_object,
                RAY_GROUP,
                RAY_VERSION,
                namespace,
                PLURALS[kind],
                name,
                missing_ok=True,
            ),
            f"get {kind} {namespace}/{name}",
            translate=translate,
        )

    def get_rayjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get("RayJob", namespace, name)

    def delete_rayjob(self, namespace: str, name: str, resource_version: str | None = None) -> bool:
        """Deleting the RayJob makes KubeRay stop its Ray job (finalizer); the shared cluster stays. Given
        `resource_version`, only if the RayJob is still as read then (False when it changed meanwhile)."""
        body = {"preconditions": {"resourceVersion": resource_version}} if resource_version else None
        return self._delete_ray_object("rayjobs", namespace, name, body, f"delete RayJob {namespace}/{name}")

    def delete_raycluster(self, namespace: str, name: str, resource_version: str) -> bool:
        """Delete the RayCluster if it is still at `resource_version`; False when it changed meanwhile."""
        body = {"preconditions": {"resourceVersion": resource_version}, "propagationPolicy": "Background"}
        return self._delete_ray_object("rayclusters", namespace, name, body, f"delete RayCluster {namespace}/{name}")

    def _delete_ray_object(
        self, plural: str, namespace: str, name: str, body: dict[str, Any] | None, what: str
    ) -> bool:
        """A ray.io object deleted (absent already: done), under the body's preconditions (False: it changed)."""
        return self._conditional(
            lambda: self._send(
                self.custom.delete_namespaced_custom_object,
                RAY_GROUP,
                RAY_VERSION,
                namespace,
                plural,
                name,
                body=body,
                missing_ok=True,
            ),
            what,
        )

    def owned(
        self, namespace: str, kind: str, labels: dict[str, str], metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        """The ray.io objects of `kind` carrying all of these labels; `metadata_only`: each one's metadata alone
        (the API server's PartialObjectMetadataList), without its spec and status."""
        return self._raw_items(
            lambda: self._send(
                self.custom.list_namespaced_custom_object,
                RAY_GROUP,
                RAY_VERSION,
                namespace,
                PLURALS[kind],
                label_selector=",".join(f"{k}={v}" for k, v in sorted(labels.items())),
                _preload_content=False,
                _headers={"Accept": METADATA_ONLY} if metadata_only else None,
            ),
            f"list {kind} in {namespace}",
        )

    def ray_clusters(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The RayClusters carrying these labels, their metadata and spec; those unchanged since this client's
        last call are not sent again (functions/adapters/cluster_specs.py)."""
        return self.cluster_specs.listed(
            namespace,
            metadata=lambda: self.owned(namespace, "RayCluster", labels, metadata_only=True),
            whole=lambda: self.owned(namespace, "RayCluster", labels),
            read=lambda name: self.raycluster(namespace, name),
        )

    def raycluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get("RayCluster", namespace, name)

    def patch_raycluster(self, namespace: str, name: str, patch: list[dict[str, Any]], what: str) -> None:
        """A JSON patch to the RayCluster, with retries for transient errors; nothing when it is gone."""
        with_retries(
            lambda: self._json_patch(namespace, name, patch, missing_ok=True),
            f"{what} ({namespace}/{name})",
            translate=translate,
        )

    def _json_patch(self, namespace: str, name: str, patch: list[dict[str, Any]], missing_ok: bool = False) -> Any:
        """One JSON patch of a RayCluster by the controller's field manager, checked as strictly as an apply."""
        return self._send(
            self.custom.patch_namespaced_custom_object,
            RAY_GROUP,
            RAY_VERSION,
            namespace,
            "rayclusters",
            name,
            patch,
            field_manager=FIELD_MANAGER,
            field_validation="Strict",
            _content_type=JSON_PATCH,
            _preload_content=False,
            missing_ok=missing_ok,
        )

    def pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._raw_items(
            lambda: self._send(
                self.core.list_namespaced_pod, namespace, label_selector=label_selector, _preload_content=False
            ),
            f"list pods {label_selector} in {namespace}",
        )

    def nodes(self) -> list[dict[str, Any]]:
        """Every node of the cluster, as the API server has it (labels, capacity, nodeInfo)."""
        return self._raw_items(lambda: self._send(self.core.list_node, _preload_content=False), "list nodes")

    def node(self, name: str) -> dict[str, Any] | None:
        """A node as the API server has it (labels, uid, bootID, conditions, taints); None when it is gone."""
        response = with_retries(
            lambda: self._send(self.core.read_node, name, missing_ok=True, _preload_content=False),
            f"get node {name}",
            translate=translate,
        )
        if response is None:
            return None
        found: dict[str, Any] = json.loads(response.data)
        return found

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        """The Events about one object (a pod), or about every pod of the namespace (pods deleted since keep
        theirs for the API server's event TTL, an hour by default), oldest first."""
        selector = f"involvedObject.name={name}" if name else "involvedObject.kind=Pod"
        items = self._raw_items(
            lambda: self._send(
                self.core.list_namespaced_event, namespace, field_selector=selector, _preload_content=False
            ),
            f"list events of {namespace}/{name or 'pods'}",
        )
        return sorted(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def job_log(self, namespace: str, run_id: str, limit: int | None = None) -> str:
        """The RayJob's driver log: the log of KubeRay's submitter pod (a batch Job named after the RayJob
        that runs `ray job submit` and follows the job's logs); empty before it starts. Given `limit`, its last
        `limit` bytes, streamed (the API's limitBytes counts from the start)."""
        pods = self.pods(namespace, f"batch.kubernetes.io/job-name={run_id}")
        if not pods:
            return ""
        newest = max(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
        response = with_retries(
            lambda: self._send(
                self.core.read_namespaced_pod_log, newest["metadata"]["name"], namespace, _preload_content=False
            ),
            f"log of {namespace}/{newest['metadata']['name']}",
            translate=translate,
        )
        try:
            data = response.data if limit is None else joblog.tail(response.stream(joblog.LOG_READ_BYTES), limit)
        finally:
            response.release_conn()
        return str(data.decode("utf-8", "replace"))

    def _raw_items(self, call: Callable[[], Any], what: str) -> list[dict[str, Any]]:
        """A list's items as plain JSON: the client's models reject objects other versions of Kubernetes
        leave fields out of, and the controller only reads a few fields."""
        # the body read inside the retries: a connection dropped mid-listing is retried as one dropped before it
        return with_retries(lambda: list(json.loads(call().data).get("items") or []), what, translate=translate)

    def worker_groups(self, namespace: str, cluster: str) -> RayClusterSeen | None:
        """The RayCluster's worker groups as read, with what every write to them is conditional on; None when
        there is no RayCluster."""
        found = self.raycluster(namespace, cluster)
        return None if found is None else RayClusterSeen.of(found)

    def set_worker_groups(
        self,
        namespace: str,
        cluster: str,
        current: RayClusterSeen,
        groups: list[dict[str, Any]],
        stamp: int,
        label: str | None = None,
    ) -> bool:
        """Make the worker groups `groups` and stamp the allocation version if the RayCluster is still at
        `current.resource_version`; False when it changed meanwhile (HTTP 409). Only the groups that change are
        sent (group_ops), checked as strictly as an apply. `label`: the deployment label's value to set too
        (adopting a RayCluster made before deployments were labelled)."""
        for group in groups:
            if int(group.get("replicas", 0)) < 0:  # the CRD accepts -1 (KubeRay 1.5.2 on a real API server)
                raise ValueError(f"replicas must be at least 0, got {group.get('replicas')}")
        stamp_path = "/metadata/annotations/" + STAMP.replace("/", "~1")
        stamped = (
            {"op": "add", "path": stamp_path, "value": str(stamp)}
            if current.annotated
            else {"op": "add", "path": "/metadata/annotations", "value": {STAMP: str(stamp)}}
        )
        patch = [*self._unchanged(current, stamp_path), *group_ops(current.groups, groups), stamped]
        if label is not None:
            patch.append({"op": "add", "path": "/metadata/labels/" + OWNER_LABEL.replace("/", "~1"), "value": label})
        return self._conditional(  # 409: changed since read. The caller looks again.
            lambda: self._json_patch(namespace, cluster, patch),
            f"set the worker groups of {namespace}/{cluster}",
            lost=(409,),
            moved=lambda: self._groups_moved(namespace, cluster, current),
        )

    def _groups_moved(self, namespace: str, cluster: str, current: RayClusterSeen) -> bool:
        """Whether a groups' patch the server could not apply met a RayCluster changed since `current` was read
        (a lost race: read again), rather than a patch of ours that is wrong (raised)."""
        fresh = self.worker_groups(namespace, cluster)

        def sizes(seen: RayClusterSeen) -> list[tuple[str, Any]]:
            return [(g["groupName"], g.get("replicas")) for g in seen.groups]

        return fresh is None or fresh.stamp != current.stamp or sizes(fresh) != sizes(current)

    @staticmethod
    def _unchanged(current: RayClusterSeen, stamp_path: str) -> list[dict[str, Any]]:
        """What a groups' write is conditional on. The controller's writes are all that change the groups, and each
        moves the stamp: a test of the stamp as read (and of each group's name and size at its index, against a hand edit)
        refuses a writer whose copy is stale, and lets KubeRay's status writes, which move the resourceVersion two
        or three times after every change of the spec, pass. A RayCluster without a stamp: its resourceVersion."""
        if not current.stamped:
            return [{"op": "replace", "path": "/metadata/resourceVersion", "value": current.resource_version}]
        return [
            {"op": "test", "path": stamp_path, "value": str(current.stamp)},
            *(
                {"op": "test", "path": f"{WORKER_GROUPS}/{index}/{field}", "value": group.get(field)}
                for index, group in enumerate(current.groups)
                for field in ("groupName", "replicas")
            ),
        ]
