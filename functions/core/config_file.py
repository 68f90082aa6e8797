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
    """YAML without aliases (no billion laughs), with the safe loader's types only and no key twice in a mapping."""
    import yaml

    class Strict(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("YAML aliases are not accepted in run configs")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.MarkedYAMLError(
                        problem=f"the key {str(key)[:80]!r} is given twice in one mapping",
                        problem_mark=key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=Strict)


def _syntax_error(err: Exception, fmt: ConfigFormat) -> str:
    """What is wrong with a document that cannot be decoded, and where (line and column, 1-based)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is not None:  # PyYAML's MarkedYAMLError
        said = problem or (str(err).splitlines() or [type(err).__name__])[0]
        return f"not valid {fmt.upper()}: {said} (line {mark.line + 1}, column {mark.column + 1})"
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"not valid {fmt.upper()}: {first}"


def decoded(raw: bytes | str, fmt: ConfigFormat = "json") -> Any:
    """A config document decoded (not validated), within the size limit; ConfigError when it cannot be."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError([f"config is {size} bytes; the limit is {MAX_CONFIG_BYTES}"])
    try:
        return jsonsafe.loads(raw) if fmt == "json" else _yaml(raw)
    except Exception as err:  # what a broken or hostile document raises: ValueError, YAMLError, RecursionError
        raise ConfigError([_syntax_error(err, fmt)]) from None


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
    if error.get("type") == "extra_forbidden":
        return f"{where}: unknown field" + _meant(error["loc"])
    return f"{where}: {error['msg']}"


def _meant(loc: tuple[Any, ...]) -> str:
    """`; did you mean X?` for a misspelt field: the closest field of the section it stands in."""
    import difflib

    model: Any = RunConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # a list index, or a union member's tag: the model stays
        found = _models_of(field.annotation)
        if not found:
            return ""
        model = found[0]
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6)
    if not close:
        return ""
    section = ".".join(str(p) for p in loc[:-1])
    return f"; did you mean {section + '.' if section else ''}{close[0]}?"


def _models_of(annotation: Any) -> list[type[BaseModel]]:
    """The model classes an annotation holds (itself, or in a union, a list, an optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for argument in get_args(annotation) for m in _models_of(argument)]


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
