"""Run config documents as users write them: JSON or YAML (no aliases), within a size limit, validated into a
RunConfig with one error line per bad field; the JSON Schema users' editors read. The controller and the CLI parse;
the trainer, shipped functions/core/config.py alone, receives configs already validated (--config-json)."""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from typing import Any, Literal, get_args

from pydantic import BaseModel

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
    """RunConfig's JSON Schema, each field described by the docstring written under it in the code. The docstrings
    are read here, when a schema is made (`raytune schema`, the config reference), not as the models are defined:
    pydantic's use_attribute_docstrings looks each class's source up at import, some 80 ms of every function
    instance's cold start for text no request reads."""
    schema = RunConfig.model_json_schema()
    for model in _models(RunConfig):
        node = schema if model is RunConfig else schema.get("$defs", {}).get(model.__name__)
        for name, doc in _attribute_docs(model).items():
            field = (node or {}).get("properties", {}).get(name)
            if field is not None:
                field.setdefault("description", doc)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://raytune.dev/schemas/run-config.schema.json"
    return schema


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """The model classes a schema names: the root's, and every model its fields hold (in unions, lists, maps)."""
    found: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for field in annotation.model_fields.values():
                    visit(field.annotation)
            return
        for argument in get_args(annotation):
            visit(argument)

    visit(root)
    return found


def _attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string literal right under its annotation), from the class's own source and its
    bases'."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, after in itertools.pairwise(body):
            documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and documented:
                text = after.value.value  # type: ignore[attr-defined]
                if isinstance(text, str):
                    docs[field.target.id] = inspect.cleandoc(text)
    return docs
