"""Experiment tracking: the run config's `tracking:` section and the table of destinations.

A run is one tracked run in each destination it names, whatever its attempts (the trainer finds it again by the
`raytune.run_id` tag and goes on at its step); a sweep is a parent with a child per trial; a nightly line's
promotions move the `champion` alias of a registered model named after the line. The record stays the source of
truth: a destination that is down never fails a run, and what it did not get is said once in the run's story.

Adding a destination: a row in DESTINATIONS, a section class below, a logger in trainer/trackers.py (the same
name), and the checklist in docs/architecture.md.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

# The tags every destination's run carries: how the trainer finds a run's tracked run again on its next attempt
# (a tracker's run id is its own), and how a sweep's trials and a nightly's versions are told apart.
RUN_ID_TAG = "raytune.run_id"
KIND_TAG = "raytune.kind"  # run | sweep (a sweep's parent) | trial
TRIAL_TAG = "raytune.trial"
TRIAL_STATE_TAG = "raytune.trial_state"  # how a trial the sweep closed ended: stopped, failed, unfinished
ATTEMPT_TAG = "raytune.attempt"
REGION_TAG = "raytune.region"
CONFIG_NAME_TAG = "raytune.config_name"
CODE_TAG = "raytune.code_sha256"
DATASET_TAG = "raytune.dataset_fingerprint"
BEST_TAG = "raytune.best_trial"  # on a sweep's parent: its best trial
BEST_RUN_TAG = "raytune.best"  # on the best trial's own run
ADAPTER_TAG = "raytune.adapter"
REPORT_TAG = "raytune.report"
CHAMPION_ALIAS = "champion"

# The environment the trainer reads each destination's credentials from (the pods get them from the Secret the
# Hugging Face token is in; locally, from the shell). Never in a config, record or log.
MLFLOW_CREDENTIALS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
WANDB_CREDENTIALS = ("WANDB_API_KEY",)

_Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


def _shaped(pattern: str, what: str) -> AfterValidator:
    """A string of `pattern`'s shape, refused as "'value' is not `what`" (pydantic's own pattern error quotes the
    regular expression, which tells a user nothing)."""
    shape = re.compile(pattern)

    def check(value: str) -> str:
        if not shape.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


# An MLflow tracking server (http, https) or Databricks; a local path or sqlite store only for `raytune local`.
_MlflowUri = Annotated[
    str,
    _shaped(
        r"^(https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?|databricks(://[A-Za-z0-9_-]+)?)$",
        "an MLflow tracking server: http(s)://host[:port][/path] or databricks",
    ),
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class MlflowSpec(_Section):
    uri: _MlflowUri | None = None
    """The MLflow tracking server (http:// or https://, or databricks); None: the deployment's
    (the operator's policy), and under `raytune local` an MLflow store in the workdir."""
    experiment: _Name | None = None
    """The experiment the run goes to; None: the config's name."""
    registered_model: _Name | None = None
    """The registered model a nightly line's champions are versions of (its `champion` alias follows them);
    None: the line's name (the config's name)."""
    copy_adapter: bool = False
    """Upload the adapter to the run's artifacts too (by default the run gets its gs:// location)."""


class WandbSpec(_Section):
    project: _Name | None = None
    """The W&B project; None: the config's name."""
    entity: _Name | None = None
    """The W&B entity (team or user); None: the API key's default entity."""
    mode: Literal["online", "offline"] = "online"
    """offline: the run's files are written beside the adapter for `wandb sync` (nothing is sent)."""


# A Vertex AI experiment's and run's name: lowercase letters, digits and hyphens, 128 at most (Vertex AI's rule).
_VertexName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,127}$")]
_VertexEndpoint = Annotated[
    str,
    _shaped(
        r"^(https://[A-Za-z0-9.-]+|http://(127\.0\.0\.1|localhost))(:[0-9]{1,5})?$",
        "an endpoint: https://host[:port], or http://127.0.0.1:port",
    ),
]
# A container image reference: [registry/]path[:tag][@sha256:digest]
_IMAGE = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]{1,128})?(@sha256:[a-f0-9]{64})?$"
_Tensorboard = Annotated[
    str,
    _shaped(
        r"^projects/[^/]+/locations/[a-z0-9-]+/tensorboards/[0-9]+$",
        "a TensorBoard instance: projects/P/locations/L/tensorboards/N",
    ),
]


class VertexSpec(_Section):
    experiment: _VertexName | None = None
    """The Vertex AI experiment the run goes to; None: the config's name."""
    project: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-:.]{4,62}$")] | None = None
    """The project of the experiment; None: the project the trainer's credentials are in (its Workload Identity)."""
    location: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z]+[0-9]+$")] | None = None
    """The Vertex AI region of the experiment; None: the region the run is in (us-central1 locally)."""
    tensorboard: _Tensorboard | None = None
    """The Vertex AI TensorBoard instance the run's curves go to (projects/P/locations/L/tensorboards/N); None:
    the experiment's backing TensorBoard, which Vertex AI's client makes the project's default one if it has none."""
    serving_image: Annotated[str, StringConstraints(pattern=_IMAGE, max_length=512)] | None = None
    """The serving container a nightly line's champions are registered with in the Vertex AI Model Registry (a
    Vertex AI model version names one: e.g. Vertex AI's prebuilt vLLM image); its `champion` version alias then
    follows the line's champion. None: champions are not registered in Vertex AI."""
    registered_model: _Name | None = None
    """The Vertex AI model (display name) a line's champions are versions of; None: the line's name."""
    endpoint: _VertexEndpoint | None = None
    """Vertex AI's API endpoint (https://, e.g. a Private Service Connect one); None: Google's regional one. An
    http:// one on this machine (127.0.0.1, localhost) is an emulator: no credentials are sent to it."""


class TrackingSpec(_Section):
    mlflow: MlflowSpec | None = None
    """Track the run in MLflow (and a nightly line's champions in its Model Registry)."""
    wandb: WandbSpec | None = None
    """Track the run in Weights & Biases."""
    vertex: VertexSpec | None = None
    """Track the run in Vertex AI Experiments (its curves in Vertex AI TensorBoard)."""

    @property
    def destinations(self) -> tuple[str, ...]:
        return tuple(name for name in DESTINATIONS if getattr(self, name) is not None)

    @property
    def pip(self) -> tuple[str, ...]:
        """The packages its destinations' clients need (a tracked run's runtime env adds them)."""
        return tuple(pin for name in self.destinations for pin in DESTINATIONS[name].pip)

    @property
    def mlflow_unplaced(self) -> bool:
        """MLflow named with no server: the operator's default server, or locally the workdir's store, is used."""
        return self.mlflow is not None and not self.mlflow.uri


@dataclass(frozen=True)
class Destination:
    """One tracking destination: the client the trainer logs with, the credentials it reads, whether it has a
    registry the champion alias moves in, and the packages the trainer needs for it."""

    client: str  # the Python package whose own client logs
    credentials: tuple[str, ...]
    registry: bool
    pip: tuple[str, ...]


DESTINATIONS: dict[str, Destination] = {
    "mlflow": Destination("mlflow", MLFLOW_CREDENTIALS, registry=True, pip=("mlflow-skinny==3.17.2",)),
    "wandb": Destination("wandb", WANDB_CREDENTIALS, registry=False, pip=("wandb==0.31.0",)),
    # Vertex AI takes the trainer's own Google credentials (Workload Identity): no key to keep.
    "vertex": Destination("google-cloud-aiplatform", (), registry=False, pip=("google-cloud-aiplatform==2.7.0",)),
}
CREDENTIALS = tuple(name for row in DESTINATIONS.values() for name in row.credentials)


def experiment_name(spec: TrackingSpec, config_name: str) -> str:
    return (spec.mlflow.experiment if spec.mlflow else None) or config_name


def vertex_experiment(spec: VertexSpec, config_name: str) -> str:
    """The Vertex AI experiment: the section's, else the config's name (a DNS label, which Vertex AI allows)."""
    return spec.experiment or config_name


def vertex_model(spec: VertexSpec, line_name: str) -> str:
    return spec.registered_model or line_name


def vertex_emulated(endpoint: str | None) -> bool:
    return bool(endpoint and endpoint.startswith("http://"))


def vertex_run(run_id: str, trial: str | None = None) -> str:
    """A tracked run's name in Vertex AI (unique in its experiment, kept across attempts): the raytune run's id
    (and trial's), as Vertex AI allows one."""
    key = f"{run_id}-{trial}" if trial else run_id
    return re.sub(r"[^a-z0-9-]", "-", key.lower()).strip("-")[:128]


def registered_model(spec: MlflowSpec, line_name: str) -> str:
    return spec.registered_model or line_name


def problems(spec: TrackingSpec | None, allowed: tuple[str, ...] | None, uris: tuple[str, ...] | None) -> list[str]:
    """The operator's rules on a config's tracking: the destinations it allows (None: any) and the MLflow servers
    a run may send to (fnmatch patterns; None: any). The credentials go wherever the URI points, so a config may
    not name a server of its own choosing where the operator names theirs."""
    if spec is None:
        return []
    found = []
    if allowed is not None:
        for name in spec.destinations:
            if name not in allowed:
                found.append(f"policy tracking_destinations: tracking.{name} is not allowed (allowed: {list(allowed)})")
    uri = spec.mlflow.uri if spec.mlflow else None
    if uri and uris is not None and not any(fnmatch.fnmatchcase(uri, pattern) for pattern in uris):
        found.append(
            f"policy tracking_uris: tracking.mlflow.uri {uri!r} is not one of the operator's tracking servers "
            f"{list(uris)} (a run's tracking credentials go where it points)"
        )
    return found


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The config as flat parameters (`training.learning_rate`: "0.0002"), each value as text, lists as JSON:
    what every destination's params/config take."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, f"{name}."))
        elif isinstance(value, (list, dict)):
            flat[name] = json.dumps(value, sort_keys=True)
        else:
            flat[name] = str(value)
    return flat
