"""The model registry a nightly line's champion alias moves in: MLflow's Model Registry, through its own client
(imported only here, and only when a promotion or a rollback needs it; the functions' import path stays light).

A line's champions are versions of one registered model (functions/core/tracking.py registered_model), each
tagged with the raytune run it is; the `champion` alias points at the current one. Every call is idempotent: a
version is found again by its run's tag before one is made, so a tick retried after a failure never registers
twice."""

from __future__ import annotations

from functions.core import tracking

TIMEOUT_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def _client(uri: str):
    import os

    for key, value in TIMEOUT_ENV.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def move_champion(uri: str, model: str, experiment: str, run_id: str, adapter_path: str) -> str:
    """Register run `run_id`'s adapter as a version of `model` (once) and point the champion alias at it (where
    it points already, nothing changes); the version. `experiment`: where the run's tracked run is, which the
    version is linked to (and, for an adapter on a local path, whose artifacts hold its copy)."""
    from mlflow.exceptions import MlflowException

    client = _client(uri)
    try:
        client.create_registered_model(model, tags={tracking.CONFIG_NAME_TAG: model})
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    found = client.search_model_versions(f"name = '{model}' and tags.`{tracking.RUN_ID_TAG}` = '{run_id}'")
    if found:
        version = str(found[0].version)
    else:
        tracked = tracked_run(client, experiment, run_id)
        made = client.create_model_version(
            model,
            source=source(adapter_path, tracked),
            run_id=tracked,
            tags={tracking.RUN_ID_TAG: run_id, tracking.ADAPTER_TAG: adapter_path},
        )
        version = str(made.version)
    if _alias_version(client, model) != version:
        client.set_registered_model_alias(model, tracking.CHAMPION_ALIAS, version)
    return version


def tracked_run(client, experiment: str, run_id: str) -> str | None:
    """The raytune run's own tracked run (a run's, or a sweep's parent), found by its tag; None: not tracked."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    query = f"tags.`{tracking.RUN_ID_TAG}` = '{run_id}' and tags.`{tracking.KIND_TAG}` != 'trial'"
    runs = client.search_runs([found.experiment_id], query, max_results=1)
    return runs[0].info.run_id if runs else None


def source(adapter_path: str, tracked_run_id: str | None) -> str:
    """What a version names: the adapter where it is (gs://), else its copy in the tracked run's artifacts (a
    registry refuses a local path, which no other machine could read)."""
    if adapter_path.startswith("gs://") or tracked_run_id is None:
        return adapter_path
    return f"runs:/{tracked_run_id}/adapter"


def champion_version(uri: str, model: str) -> str | None:
    """The version the champion alias points at (None: no alias, or no such model)."""
    return _alias_version(_client(uri), model)


def _alias_version(client, model: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(model, tracking.CHAMPION_ALIAS).version)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise
