"""A Vertex AI stand-in for what Vertex AI Experiments and TensorBoard take from a run, and what the Model
Registry takes from a promotion, speaking the REST API (v1) that google-cloud-aiplatform's own clients use with
`api_transport="rest"`.

Every request body is parsed with google-cloud-aiplatform's own type for it (`Context`, `TensorboardRun`,
`WriteTensorboardRunDataRequest`, ...), strictly: a field the API does not have is refused with a 400, as Vertex AI
refuses it. Resources follow Google's resource rules (AIP-121..135): made under their parent with the id the
request names (409 where it exists), read by name (404), updated with or without an update mask, listed with
the filters the client sends (`field="value"` clauses joined by AND); a create Vertex AI runs as a long-running
operation answers with a finished one. What it holds is what a person would see in the console: `resources`, by
resource name, as JSON, and `models`, each model's versions. A model's versions follow Vertex AI's rules: the
first is `default`; a version alias is unique within the model, and applying one another version holds moves it
("How to use model version aliases")."""

from __future__ import annotations

import itertools
import json
import re
import threading
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes.http import BackgroundServer, JsonHandler


def _types():
    from google.cloud.aiplatform_v1 import types

    return types


# collection -> (its type's name, the create's id parameter, whether the create is a long-running operation,
# the list answer's key)
COLLECTIONS = {
    "metadataStores": ("MetadataStore", "metadataStoreId", True, "metadataStores"),
    "contexts": ("Context", "contextId", False, "contexts"),
    "artifacts": ("Artifact", "artifactId", False, "artifacts"),
    "executions": ("Execution", "executionId", False, "executions"),
    "tensorboards": ("Tensorboard", None, True, "tensorboards"),
    "experiments": ("TensorboardExperiment", "tensorboardExperimentId", False, "tensorboardExperiments"),
    "runs": ("TensorboardRun", "tensorboardRunId", False, "tensorboardRuns"),
    "timeSeries": ("TensorboardTimeSeries", "tensorboardTimeSeriesId", False, "tensorboardTimeSeries"),
}
# name:verb -> its request type (the body, less the fields the path carries)
VERBS = {
    "addContextChildren": "AddContextChildrenRequest",
    "addContextArtifactsAndExecutions": "AddContextArtifactsAndExecutionsRequest",
    "write": "WriteTensorboardRunDataRequest",
}
STAMP = "2026-12-07T00:00:00Z"


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class FakeVertex(BackgroundServer):
    def __init__(self) -> None:
        self.resources: dict[str, dict[str, Any]] = {}
        self.children: dict[str, list[str]] = {}  # an experiment's context -> its runs' contexts
        self.points: dict[str, list[dict[str, Any]]] = {}  # a TensorBoard run -> the time series data written
        self.models: dict[str, list[dict[str, Any]]] = {}  # model name -> its versions, oldest first
        self.requests: list[tuple[str, str]] = []
        self.refused: list[str] = []  # bodies the API would refuse
        self.failing = 0  # answer the next N requests 503, as Vertex AI does when it is unavailable
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        fake = self

        class Handler(JsonHandler):
            def handle_any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode() or "{}"
                url = urlsplit(self.path)
                with fake._lock:
                    fake.requests.append((self.command, url.path))
                    if fake.failing:
                        fake.failing -= 1
                        return self.reply(503, _error(503, "The service is currently unavailable."))
                    try:
                        status, answer = fake.answer(self.command, unquote(url.path), parse_qs(url.query), body)
                    except Refused as refused:
                        if refused.status == 400:
                            fake.refused.append(f"{self.command} {url.path}: {refused}")
                        status, answer = refused.status, _error(refused.status, str(refused))
                self.reply(status, answer)

            do_GET = do_POST = do_PATCH = do_DELETE = handle_any

        super().__init__(Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    # -- the API --------------------------------------------------------------------------------------------

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: str) -> tuple[int, Any]:
        path = path.removeprefix("/v1/")
        name, _, verb = path.partition(":")
        *parent, collection = name.split("/")
        if "/models" in name:
            return 200, self.model_service(method, name, verb, query, body)
        if verb:
            return 200, self.verb(name, verb, body)
        if method == "GET" and name in self.resources:
            return 200, self.resources[name]
        if method == "GET" and collection in COLLECTIONS and len(parent) % 2 == 0:
            return 200, self.list("/".join(parent), collection, (query.get("filter") or [""])[0])
        if method == "GET":
            raise Refused(404, f"{name} is not found.")
        if method == "POST" and collection in COLLECTIONS:
            return 200, self.create("/".join(parent), collection, query, body)
        if method == "PATCH":
            return 200, self.update(name, (query.get("updateMask") or [""])[0], body)
        if method == "DELETE" and name in self.resources:
            del self.resources[name]
            return 200, {"name": f"{name}/operations/{next(self._ids)}", "done": True}
        raise Refused(404, f"{method} {name} is not found.")

    def parsed(self, type_name: str, body: str) -> dict[str, Any]:
        kind = getattr(_types(), type_name)
        try:
            message = kind.from_json(body)  # strict: a field the type lacks is refused
        except Exception as exc:
            raise Refused(400, f"Invalid JSON payload for {type_name}: {exc}") from None
        return json.loads(kind.to_json(message))

    def create(self, parent: str, collection: str, query: dict[str, list[str]], body: str) -> dict[str, Any]:
        type_name, id_param, long_running, _ = COLLECTIONS[collection]
        resource = self.parsed(type_name, body)
        given = (query.get(id_param) or [""])[0] if id_param else ""
        if given and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", given):
            raise Refused(400, f"{id_param} {given!r} does not match [a-z0-9][a-z0-9-]{{0,127}}")
        name = f"{parent}/{collection}/{given or next(self._ids)}"
        if name in self.resources:
            raise Refused(409, f"{name} already exists.")
        resource.update(name=name, createTime=STAMP, updateTime=STAMP, etag=str(next(self._ids)))
        if collection == "contexts" and "metadata" not in resource:
            resource["metadata"] = {}
        self.resources[name] = resource
        if not long_running:
            return resource
        kind = f"type.googleapis.com/google.cloud.aiplatform.v1.{type_name}"
        return {"name": f"{name}/operations/{next(self._ids)}", "done": True, "response": {"@type": kind, **resource}}

    def update(self, name: str, mask: str, body: str) -> dict[str, Any]:
        current = self.resources.get(name)
        if current is None:
            raise Refused(404, f"{name} is not found.")
        collection = name.split("/")[-2]
        given = self.parsed(COLLECTIONS[collection][0], body)
        fields = [_camel(f) for f in mask.split(",") if f] or [k for k in given if k not in ("name", "createTime")]
        for field in fields:
            if field in given:
                current[field] = given[field]
            else:
                current.pop(field, None)
        current["updateTime"] = STAMP
        return current

    def list(self, parent: str, collection: str, filter_: str) -> dict[str, Any]:
        prefix = f"{parent}/{collection}/"
        found = [
            r
            for n, r in self.resources.items()
            if n.startswith(prefix) and "/" not in n[len(prefix) :] and _matches(r, filter_)
        ]
        return {COLLECTIONS[collection][3]: found}

    def verb(self, name: str, verb: str, body: str) -> dict[str, Any]:
        if verb not in VERBS:
            raise Refused(404, f"{name}:{verb} is not a method this stand-in serves.")
        request = self.parsed(VERBS[verb], body)
        if name not in self.resources:
            raise Refused(404, f"{name} is not found.")
        if verb == "addContextChildren":
            for child in request.get("childContexts", []):
                if child not in self.resources:
                    raise Refused(404, f"{child} is not found.")
                self.resources[child].setdefault("parentContexts", [])
                if name not in self.resources[child]["parentContexts"]:
                    self.resources[child]["parentContexts"].append(name)
                    self.children.setdefault(name, []).append(child)
        elif verb == "write":
            for series in request.get("timeSeriesData", []):
                if f"{name}/timeSeries/{series['tensorboardTimeSeriesId']}" not in self.resources:
                    raise Refused(404, f"time series {series['tensorboardTimeSeriesId']} of {name} is not found.")
            self.points.setdefault(name, []).extend(request.get("timeSeriesData", []))
        return {}

    # -- the Model Registry -------------------------------------------------------------------------------------

    def model_service(self, method: str, name: str, verb: str, query: dict[str, list[str]], body: str) -> Any:
        filter_ = (query.get("filter") or [""])[0]
        if name.endswith("/models") and verb == "upload" and method == "POST":
            return self.upload(name.removesuffix("/models"), self.parsed("UploadModelRequest", body))
        if name.endswith("/models") and method == "GET":
            heads = [self.version(m, "default") for m in self.models if m.startswith(f"{name}/")]
            return {"models": [v for v in heads if _matches(v, filter_)]}
        model, _, which = name.partition("@")
        if model not in self.models:
            raise Refused(404, f"Model {model} is not found.")
        if verb == "listVersions" and method == "GET":
            return {"models": [v for v in self.models[model] if _matches(v, filter_)]}
        if verb == "mergeVersionAliases" and method == "POST":
            return self.merge(model, which, self.parsed("MergeVersionAliasesRequest", body))
        if not verb and method == "GET":
            return self.version(model, which or "default")
        raise Refused(404, f"{method} {name}:{verb} is not a method this stand-in serves.")

    def upload(self, parent: str, request: dict[str, Any]) -> dict[str, Any]:
        model = request["model"]
        if not model.get("containerSpec", {}).get("imageUri"):
            raise Refused(400, "Model.container_spec.image_uri is required for a custom model.")
        if not str(model.get("artifactUri", "")).startswith("gs://"):
            raise Refused(400, "Model.artifact_uri must be a Cloud Storage URI (gs://).")
        name = request.get("parentModel") or f"{parent}/models/{next(self._ids)}"
        if request.get("parentModel") and name not in self.models:
            raise Refused(404, f"Model {name} is not found.")
        versions = self.models.setdefault(name, [])
        version = {
            **model,
            "name": name,
            "versionId": str(len(versions) + 1),
            "versionAliases": [a for a in model.get("versionAliases", []) if not versions or a != "default"],
            "createTime": STAMP,
        }
        if not versions:
            version["versionAliases"] = ["default", *version["versionAliases"]]
        for alias in version["versionAliases"]:
            for other in versions:
                other["versionAliases"] = [a for a in other["versionAliases"] if a != alias]
        versions.append(version)
        response = {"model": name, "modelVersionId": version["versionId"]}
        kind = "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse"
        return {"name": f"{name}/operations/{next(self._ids)}", "done": True, "response": {"@type": kind, **response}}

    def version(self, model: str, which: str) -> dict[str, Any]:
        for version in self.models.get(model, []):
            if which in (version["versionId"], *version["versionAliases"]):
                return version
        raise Refused(404, f"Model {model}@{which} is not found.")

    def merge(self, model: str, which: str, request: dict[str, Any]) -> dict[str, Any]:
        version = self.version(model, which)
        for alias in request.get("versionAliases", []):
            if alias.startswith("-"):
                if alias == "-default":
                    raise Refused(400, "The default alias cannot be removed; move it to another version.")
                version["versionAliases"] = [a for a in version["versionAliases"] if a != alias[1:]]
                continue
            if not re.fullmatch(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]", alias):
                raise Refused(400, f"Invalid alias {alias!r}.")
            for other in self.models[model]:
                other["versionAliases"] = [a for a in other["versionAliases"] if a != alias]
            version["versionAliases"].append(alias)
        return version

    def aliased(self, model: str, alias: str) -> str | None:
        """The version id an alias is on (None: none)."""
        return next((v["versionId"] for v in self.models.get(model, []) if alias in v["versionAliases"]), None)

    # -- what a person would read -----------------------------------------------------------------------------

    def curve(self, run: str, metric: str) -> list[tuple[int, float]]:
        """(step, value) of one metric of a TensorBoard run, in the order written."""
        ids = {
            n.rsplit("/", 1)[1]: r["displayName"]
            for n, r in self.resources.items()
            if n.startswith(f"{run}/timeSeries/")
        }
        return [
            (int(v["step"]), float(v["scalar"]["value"]))
            for series in self.points.get(run, [])
            if ids.get(series["tensorboardTimeSeriesId"]) == metric
            for v in series["values"]
        ]


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


def _matches(resource: dict[str, Any], filter_: str) -> bool:
    """Vertex AI's list filter, as far as the client uses it: `field="value"` or `field:"value"` clauses, AND."""
    for clause in filter(None, (c.strip() for c in re.split(r"\bAND\b", filter_))):
        match = re.fullmatch(r'([\w.]+)\s*(=|:)\s*"?([^"]*)"?', clause)
        if not match:
            raise Refused(400, f"unsupported filter clause {clause!r}")
        field, op, value = match.groups()
        got: Any = resource
        for key in field.split("."):
            # a map's keys (labels.<key>) are as given; a message's fields are camelCase in JSON
            got = got.get(key if got is resource.get("labels") else _camel(key)) if isinstance(got, dict) else None
        if op == "=" and str(got).lower() != value.lower():
            return False
        if op == ":" and not (isinstance(got, list) and value in got):
            return False
    return True


def _error(code: int, message: str) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 503: "UNAVAILABLE"}[code]
    return {"error": {"code": code, "message": message, "status": status}}
