"""Terraform's expressions evaluated offline, for tests: the resources a configuration declares for given
variable values, with count and for_each expanded and attributes computed as Terraform would, except that
what only apply can know (ids, emails, project numbers) stays a symbolic `${...}` reference.

The provider can't be downloaded here, so `terraform plan` can't run; this reads the same files with
python-hcl2's grammar (its raw parse tree) and evaluates the subset of the language this repository uses.
Anything outside that subset raises, so a new construct fails a test instead of being misread."""

from __future__ import annotations

import base64
import json
import operator
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from itertools import product
from pathlib import Path
from typing import Any

from hcl2.parser import parser
from lark import Token, Tree


class Unknown:
    """A value known only after apply; attributes and indexes of it stay unknown."""

    def __init__(self, ref: str):
        self.ref = ref

    def attr(self, name: str) -> Unknown:
        return Unknown(f"{self.ref}.{name}")

    def __str__(self) -> str:
        return "${" + self.ref + "}"

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unknown) and other.ref == self.ref

    def __hash__(self) -> int:
        return hash(self.ref)


def _children(tree: Tree) -> list[Any]:
    """Children without punctuation tokens and comments/newlines."""
    return [c for c in tree.children if not isinstance(c, Token) and c.data != "new_line_or_comment"]


def _name(node: Any) -> str:
    if isinstance(node, Token):
        return str(node)
    if node.data in ("identifier", "keyword", "literal_value"):
        return str(node.children[0])
    if node.data == "string":
        return "".join(str(p.children[0]) for p in node.children if isinstance(p, Tree))
    if node.data == "expr_term":
        return _name(node.children[0])
    raise ValueError(f"not a name: {node}")


@dataclass
class Block:
    kind: str
    labels: tuple[str, ...]
    body: dict[str, Any]  # attribute name -> expression tree
    blocks: list[Block] = field(default_factory=list)


def _body(tree: Tree) -> tuple[dict[str, Any], list[Block]]:
    attributes: dict[str, Any] = {}
    blocks: list[Block] = []
    for node in _children(tree):
        if node.data == "attribute":
            name, value = _children(node)
            attributes[_name(name)] = value
        elif node.data == "block":
            parts = _children(node)
            inner = next(p for p in parts if p.data == "body")
            labels = tuple(_name(p) for p in parts if p.data != "body")
            attrs, nested = _body(inner)
            blocks.append(Block(labels[0], labels[1:], attrs, nested))
    return attributes, blocks


@cache
def _parse(text: str) -> list[Block]:
    return _body(parser().parse(text + "\n").children[0])[1]


class Module:
    """A folder of .tf files, for one set of variable values."""

    def __init__(self, folder: Path, variables: Mapping[str, Any] | None = None):
        self.folder = folder
        self.given = dict(variables or {})
        self.blocks: list[Block] = []
        for path in sorted(folder.glob("*.tf")):
            self.blocks += _parse(path.read_text())
        self.variables = {b.labels[0]: b for b in self.blocks if b.kind == "variable"}
        self.locals = {k: v for b in self.blocks if b.kind == "locals" for k, v in b.body.items()}
        self.resources = {(b.labels[0], b.labels[1]): b for b in self.blocks if b.kind == "resource"}
        if unknown := set(self.given) - set(self.variables):
            raise KeyError(f"no such variables: {sorted(unknown)}")
        self._cache: dict[str, Any] = {}

    # -- what tests read -----------------------------------------------------------------------------------

    def instances(self, kind: str) -> Iterator[Instance]:
        """Every instance of every resource of this type, count and for_each expanded."""
        for (k, _), block in self.resources.items():
            if k == kind:
                yield from self._expand(block)

    def var(self, name: str) -> Any:
        if name in self.given:
            return self.given[name]
        block = self.variables[name]
        if "default" not in block.body:
            raise KeyError(f"variable {name} has no default: give it")
        return self.eval(block.body["default"], {})

    def local(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self.eval(self.locals[name], {})
        return self._cache[name]

    # -- expansion -----------------------------------------------------------------------------------------

    def _expand(self, block: Block) -> Iterator[Instance]:
        address = f"{block.labels[0]}.{block.labels[1]}"
        if "count" in block.body:
            for i in range(int(self.eval(block.body["count"], {}))):
                yield Instance(self, block, f"{address}[{i}]", {"count.index": i})
        elif "for_each" in block.body:
            each = self.eval(block.body["for_each"], {})
            pairs = each.items() if isinstance(each, dict) else ((v, v) for v in each)
            for key, value in pairs:
                yield Instance(self, block, f'{address}["{key}"]', {"each.key": key, "each.value": value})
        else:
            yield Instance(self, block, address, {})

    def _resource(self, kind: str, name: str) -> Any:
        block = self.resources[(kind, name)]
        found = list(self._expand(block))
        if "count" in block.body:
            return found
        if "for_each" in block.body:
            return {i.scope["each.key"]: i for i in found}
        return found[0]

    # -- expressions ---------------------------------------------------------------------------------------

    def eval(self, node: Any, scope: dict[str, Any]) -> Any:
        kind = node.data
        if kind == "expr_term":
            parts = _children(node)
            return self.eval(parts[0], scope)
        if kind in ("int_lit", "float_lit"):
            text = str(node.children[0])
            return float(text) if kind == "float_lit" else int(text)
        if kind == "literal_value":
            return {"true": True, "false": False, "null": None}[str(node.children[0])]
        if kind == "string":
            return self._string(node, scope)
        if kind in ("heredoc_template", "heredoc_template_trim"):
            return self._heredoc(str(node.children[0]), scope)
        if kind == "tuple":
            return [self.eval(c, scope) for c in _children(node)]
        if kind == "object":
            result = {}
            for elem in _children(node):
                key_node, value = _children(elem)
                key = _children(key_node)[0]
                bare = key if key.data == "keyword" else _children(key)[0] if key.data == "expr_term" else None
                is_name = bare is not None and bare.data in ("identifier", "keyword")
                result[_name(bare) if is_name else self.eval(key, scope)] = self.eval(value, scope)
            return result
        if kind == "identifier":
            name = _name(node)
            if name in scope:
                return scope[name]
            return _Root(self, name, scope)
        if kind == "get_attr_expr_term":
            base, attr = _children(node)
            return self._attr(self.eval(base, scope), _name(_children(attr)[0]), scope)
        if kind == "index_expr_term":
            base, index = _children(node)
            key = self.eval(_children(index)[0], scope) if index.data == "braces_index" else int(index.children[1])
            value = self._value(self.eval(base, scope))
            return value.attr(f"[{key!r}]") if isinstance(value, Unknown) else value[key]
        if kind == "conditional":
            cond, yes, no = _children(node)
            test = self._value(self.eval(cond, scope))
            if isinstance(test, Unknown):
                raise ValueError(f"condition unknown before apply: {test}")
            return self.eval(yes if test else no, scope)
        if kind == "binary_op":
            left, term = _children(node)
            sign, right = _children(term)
            return _binary(
                str(sign.children[0]),
                self._value(self.eval(left, scope)),
                lambda: self._value(self.eval(right, scope)),
            )
        if kind == "unary_op":
            sign = str(node.children[0])
            value = self._value(self.eval(_children(node)[0], scope))
            return (not value) if sign == "!" else -value
        if kind == "function_call":
            parts = _children(node)
            args = [self._value(self.eval(a, scope)) for a in (_children(parts[1]) if len(parts) > 1 else [])]
            return _call(_name(parts[0]), args)
        if kind in ("for_tuple_expr", "for_object_expr"):
            return self._for(node, scope)
        raise NotImplementedError(f"tests/tfeval.py does not evaluate {kind}")

    def _for(self, node: Tree, scope: dict[str, Any]) -> Any:
        parts = _children(node)
        intro, body = parts[0], parts[1:]
        cond = body.pop() if body and body[-1].data == "for_cond" else None
        names = [_name(c) for c in _children(intro)[:-1]]
        collection = self._value(self.eval(_children(intro)[-1], scope))
        pairs = collection.items() if isinstance(collection, dict) else enumerate(collection)
        result: Any = {} if node.data == "for_object_expr" else []
        for key, value in pairs:
            inner = {**scope, **({names[0]: value} if len(names) == 1 else {names[0]: key, names[1]: value})}
            if cond is not None and not self._value(self.eval(_children(cond)[0], inner)):
                continue
            if node.data == "for_object_expr":
                result[self._value(self.eval(body[0], inner))] = self._value(self.eval(body[1], inner))
            else:
                result.append(self._value(self.eval(body[0], inner)))
        return result

    def _string(self, node: Tree, scope: dict[str, Any]) -> Any:
        values = []
        for part in node.children:
            if not isinstance(part, Tree):
                continue
            inner = part.children[0]
            if isinstance(inner, Token):
                values.append(inner.encode().decode("unicode_escape") if "\\" in inner else str(inner))
            elif inner.data == "interpolation":
                values.append(self._value(self.eval(_children(inner)[0], scope)))
            else:
                raise NotImplementedError(f"template directive {inner.data}")
        if len(values) == 1 and not isinstance(values[0], str):
            return values[0]  # "${x}" is x itself
        return "".join(_text(v) for v in values)

    def _heredoc(self, raw: str, scope: dict[str, Any]) -> str:
        body = raw.split("\n", 1)[1].rsplit("\n", 2)[0] + "\n"
        if raw.startswith("<<-"):
            lines = body.splitlines()
            indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
            body = "\n".join(line[indent:] for line in lines) + "\n"
        return body  # interpolations kept as written

    def _attr(self, base: Any, name: str, scope: dict[str, Any]) -> Any:
        if isinstance(base, _Root):
            return base.attr(name)
        if isinstance(base, Instance):
            return base.get(name)
        if isinstance(base, Unknown):
            return base.attr(name)
        if isinstance(base, dict):
            return base[name]
        raise TypeError(f"no attribute {name} on {base!r}")

    def _value(self, value: Any) -> Any:
        if isinstance(value, _Root):
            raise ValueError(f"incomplete reference {value.name}")
        return value


class _Root:
    """The first word of a reference: var, local, each, count, data, path, or a resource type."""

    def __init__(self, module: Module, name: str, scope: dict[str, Any], path: tuple[str, ...] = ()):
        self.module, self.name, self.scope, self.path = module, name, scope, path

    def attr(self, name: str) -> Any:
        m, path = self.module, (*self.path, name)
        if self.name == "var":
            return m.var(name)
        if self.name == "local":
            return m.local(name)
        if self.name in ("each", "count"):
            return self.scope[f"{self.name}.{name}"]
        if self.name == "path":
            return str(m.folder)
        if self.name == "data":
            return self._more(path, 2, lambda: Unknown("data." + ".".join(path)))
        if (self.name, name) in m.resources:
            return m._resource(self.name, name)
        raise KeyError(f"unknown reference {self.name}.{'.'.join(path)}")

    def _more(self, path: tuple[str, ...], depth: int, done: Any) -> Any:
        return done() if len(path) >= depth else _Root(self.module, self.name, self.scope, path)


class Instance:
    """One instance of a resource: its declared attributes evaluated on demand, the rest unknown."""

    def __init__(self, module: Module, block: Block, address: str, scope: dict[str, Any]):
        self.module, self.block, self.address, self.scope = module, block, address, scope
        self.kind, self.name = block.labels

    def has(self, name: str) -> bool:
        return name in self.block.body

    def get(self, name: str) -> Any:
        if name in self.block.body:
            return self.module.eval(self.block.body[name], dict(self.scope))
        return Unknown(f"{self.address}.{name}")

    def blocks(self, kind: str) -> list[Block]:
        return [b for b in self.block.blocks if b.kind == kind]

    def __repr__(self) -> str:
        return self.address


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


OPERATORS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "%": operator.mod,
}


def _binary(symbol: str, left: Any, right: Any) -> Any:
    """`right` is a thunk: `&&` and `||` evaluate it only when needed, as Terraform does."""
    if symbol == "&&":
        return left and right()
    if symbol == "||":
        return left or right()
    return OPERATORS[symbol](left, right())


# The Terraform functions this repository uses, as Terraform computes them.
FUNCTIONS: dict[str, Any] = {
    "merge": lambda *maps: {k: v for m in maps for k, v in m.items()},
    "concat": lambda *lists: [x for values in lists for x in values],
    "setproduct": lambda *sets: [list(p) for p in product(*sets)],
    "keys": lambda m: sorted(m),
    "values": lambda m: [m[k] for k in sorted(m)],
    "toset": lambda values: sorted(dict.fromkeys(values), key=str),
    "tolist": list,
    "distinct": lambda values: list(dict.fromkeys(values)),
    # the first argument that is neither null nor an empty string (Terraform's coalesce)
    "coalesce": lambda *values: next(v for v in values if v is not None and v != ""),
    "flatten": lambda values: [x for v in values for x in (v if isinstance(v, list) else [v])],
    "length": len,
    "tostring": _text,
    "join": lambda sep, values: sep.join(_text(v) for v in values),
    "replace": lambda s, old, new: s.replace(old, new),
    "lower": str.lower,
    "contains": lambda values, x: x in values,
    "lookup": lambda m, k, default=None: m.get(k, default),
    "jsonencode": lambda v: json.dumps(v, default=str, separators=(",", ":")),
    "base64encode": lambda s: base64.b64encode(s.encode()).decode(),
    "can": lambda v: True,
    "regex": lambda pattern, s: re.search(pattern, s).group(0),
    "substr": lambda s, offset, length: s[offset : offset + length] if length >= 0 else s[offset:],
    "format": lambda spec, *values: spec.replace("%s", "{}").format(*values),
}


def _call(name: str, args: list[Any]) -> Any:

    if name not in FUNCTIONS:
        raise NotImplementedError(f"tests/tfeval.py does not know the function {name}()")
    if any(isinstance(a, Unknown) for a in args) and name not in ("merge", "concat", "jsonencode", "base64encode"):
        return Unknown(f"{name}(...)")
    return FUNCTIONS[name](*args)
