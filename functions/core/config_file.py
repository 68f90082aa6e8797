"""Run config documents as users write them: JSON or YAML (no aliases), within a size limit, validated into a
RunConfig with one error line per bad field; the JSON Schema users' editors read. The controller and the CLI parse;
the trainer, shipped functions/core/config.py alone, receives configs already validated (--config-json)."""

from __future__ import annotations

from typing import Any, Literal

from functions.core import jsonsafe
from functions.core.config import ConfigError, RunConfig

MAX_CONFIG_BYTES = 64 * 1024
ConfigFormat = Literal["json", "yaml"]
YAML_SUFFIXES = (".yaml", ".yml")


def config_format(name: str) -> ConfigFormat:
    """A config's format from its file or object name."""
    return "yaml" if name.lower().endswith(YAML_SUFFIXES) else "json"


def _yaml(text: bytes | str) -> Any:
    """YAML without aliases (no billion laughs) and with the safe loader's types only."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("YAML aliases are not accepted in run configs")
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)


def decoded(raw: bytes | str, fmt: ConfigFormat = "json") -> Any:
    """A config document decoded (not validated), within the size limit; ConfigError when it cannot be."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError([f"config is {size} bytes; the limit is {MAX_CONFIG_BYTES}"])
    try:
        return jsonsafe.loads(raw) if fmt == "json" else _yaml(raw)
    except Exception as err:  # what a broken or hostile document raises: ValueError, YAMLError, RecursionError
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError([f"not valid {fmt.upper()}: {first}"]) from None


def parse_config(raw: bytes | str | dict[str, Any], fmt: ConfigFormat = "json") -> RunConfig:
    """Validate raw JSON or YAML (or a decoded dict) into a RunConfig, raising ConfigError with per-field
    reasons."""
    from pydantic import ValidationError

    if isinstance(raw, (bytes, str)):
        raw = decoded(raw, fmt)
    if not isinstance(raw, dict):
        raise ConfigError([f"config must be a {fmt.upper()} object (a mapping of sections)"])
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError([_describe(e) for e in err.errors()]) from None


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "config"
    return f"{where}: {error['msg']}"


def json_schema() -> dict[str, Any]:
    schema = RunConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://raytune.dev/schemas/run-config.schema.json"
    return schema
