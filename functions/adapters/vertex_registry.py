"""A nightly line's `champion` alias in the Vertex AI Model Registry, through Vertex AI's own client
(google-cloud-aiplatform's `ModelServiceClient`, REST, imported only when a promotion or a rollback moves it).

A line's champions are versions of one Vertex AI model (display name: the line's, or
`tracking.vertex.registered_model`), each the champion run's merged model (else its adapter) at its `gs://`
location with the serving container the config names, labelled with the run. A version alias is unique within a
model and moves when another version takes it (Vertex AI's "How to use model version aliases": applying an alias
another version holds removes it there), so one MergeVersionAliases call moves `champion`. Every call is
idempotent: a model and a version are found again (by display name, by the run's label) before one is made."""

from __future__ import annotations

import re
from dataclasses import dataclass

from functions.core import tracking

RUN_LABEL = "raytune_run_id"  # a label key: lowercase letters, digits, `_` (a `-` is minus in a list filter)
TIMEOUT_S = 30.0  # each call's bound
UPLOAD_BOUND_S = 300.0  # an upload is a long-running operation


@dataclass(frozen=True)
class Place:
    """Where the model is: its project and region, and the API endpoint (None: Google's regional one)."""

    project: str
    location: str
    endpoint: str | None = None

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.location}"


def label(run_id: str) -> str:
    """A run id as a label value (lowercase letters, digits, `-` and `_`, at most 63)."""
    return re.sub(r"[^a-z0-9_-]", "-", run_id.lower())[:63]


def _client(place: Place):
    from google.cloud import aiplatform_v1

    options = {"api_endpoint": place.endpoint or f"{place.location}-aiplatform.googleapis.com"}
    kwargs = {}
    if tracking.vertex_emulated(place.endpoint):
        from google.auth.credentials import AnonymousCredentials

        kwargs["credentials"] = AnonymousCredentials()
    return aiplatform_v1.ModelServiceClient(client_options=options, transport="rest", **kwargs)


def move_champion(place: Place, model: str, run_id: str, artifact_uri: str, image: str) -> str:
    """Run `run_id`'s artifact registered (once) as a version of `model`, and the champion alias on it; the
    version as `<model resource>@<version id>`."""
    from google.cloud import aiplatform_v1

    client = _client(place)
    found = _model(client, place, model)
    version = _version(client, found, run_id) if found else None
    if version is None:
        spec = aiplatform_v1.Model(
            display_name=model,
            artifact_uri=artifact_uri,
            container_spec=aiplatform_v1.ModelContainerSpec(image_uri=image),
            labels={RUN_LABEL: label(run_id)},
            version_description=f"raytune run {run_id}",
        )
        request = aiplatform_v1.UploadModelRequest(parent=place.parent, model=spec, parent_model=found or "")
        done = client.upload_model(request=request, timeout=TIMEOUT_S).result(timeout=UPLOAD_BOUND_S)
        found, version = done.model, done.model_version_id
    assert found is not None
    if _alias_version(client, found) != version:
        request = {"name": f"{found}@{version}", "version_aliases": [tracking.CHAMPION_ALIAS]}
        client.merge_version_aliases(request=request, timeout=TIMEOUT_S)
    return f"{found}@{version}"


def champion_version(place: Place, model: str) -> str | None:
    """The version id the champion alias points at (None: no alias, or no such model)."""
    client = _client(place)
    found = _model(client, place, model)
    return _alias_version(client, found) if found else None


def _model(client, place: Place, model: str) -> str | None:
    request = {"parent": place.parent, "filter": f'display_name="{model}"'}
    models = client.list_models(request=request, timeout=TIMEOUT_S)
    return next((m.name for m in models), None)


def _version(client, model: str, run_id: str) -> str | None:
    request = {"name": model, "filter": f'labels.{RUN_LABEL}="{label(run_id)}"'}
    versions = client.list_model_versions(request=request, timeout=TIMEOUT_S)
    return next((v.version_id for v in versions), None)


def _alias_version(client, model: str) -> str | None:
    from google.api_core.exceptions import NotFound

    try:
        return str(client.get_model(name=f"{model}@{tracking.CHAMPION_ALIAS}", timeout=TIMEOUT_S).version_id)
    except NotFound:
        return None
