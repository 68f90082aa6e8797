"""`--set FIELD=VALUE` on `validate`, `render`, `local` and `submit`: a config file's fields overridden on the
command line by their dotted names (`training.epochs=1`, `scaling.nodes=1`), typed through the schema like
the file's own values. The run gets the file as overridden, so its record and `compare` show the values."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from functions.core import config as configs
from functions.core import config_file
from functions.core.fields import NotASection, with_value


def overridden(path: str, sets: list[str] | None) -> str:
    """The config file with the overrides applied, written under the same name (the run's name and the uploaded
    object's come from it) in a folder of its own for this process; `path` itself when there is nothing to set.
    A malformed override or a value the schema refuses is a ConfigError naming it."""
    if not sets:
        return path
    fmt = config_file.config_format(path)
    raw = Path(path).read_bytes()
    data = config_file.decoded(raw, fmt)
    if not isinstance(data, dict):
        raise configs.ConfigError([f"{path}: config must be an object to --set fields in"])
    for item in sets:
        key, sep, value = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise configs.ConfigError([f"--set {item!r}: use FIELD=VALUE, e.g. --set training.epochs=1"])
        try:
            data = with_value(data, ".".join(parts), _merged(_at(data, parts), _typed(value)))
        except NotASection as section:
            raise configs.ConfigError([f"--set {item!r}: {section} is not a section"]) from None
    try:
        config_file.parse_config(data)
    except configs.ConfigError as err:
        raise configs.ConfigError([f"{path} with --set {', '.join(sets)}: {line}" for line in err.errors]) from None
    folder = Path(tempfile.mkdtemp(prefix="raytune-set-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    target = folder / Path(path).name
    target.write_text(json.dumps(data, indent=2) if fmt == "json" else _yaml_text(data))
    return str(target)


def _at(data: dict[str, Any], parts: list[str]) -> Any:
    """What the file sets at a dotted name (None where it sets nothing)."""
    for part in parts:
        if not isinstance(data, dict):
            return None
        data = data.get(part)  # type: ignore[assignment]
    return data


def _merged(given: Any, value: Any) -> Any:
    """A section set on the command line (`--set dataset={"id": ...}`) adds to the file's, field by field, as a
    second document would: what the file sets and the override does not name stays (eval_fraction, ...)."""
    if isinstance(given, dict) and isinstance(value, dict):
        return {**given, **{k: _merged(given.get(k), v) for k, v in value.items()}}
    return value


def _typed(value: str) -> Any:
    """A value as JSON reads it (1, 2e-4, true, null, [1, 2], {"a": 1}), else YAML's scalars, else the text."""
    try:
        return json.loads(value)
    except ValueError:
        pass
    import yaml

    try:
        loaded = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return loaded if isinstance(loaded, str | int | float | bool | list | dict) else value


def _yaml_text(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
