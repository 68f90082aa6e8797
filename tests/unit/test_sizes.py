"""The house's sizes, held as test_readme.py holds the README: a source file at most 600 lines and a function at
most 60, so a feature lands as a module of its own instead of growing the same files."""

from __future__ import annotations

import ast

import pytest

from tests.harness import ROOT

pytestmark = pytest.mark.unit
MAX_FILE_LINES, MAX_FUNCTION_LINES = 600, 60
# Tables that are one thing each, whose rows would only be scattered by a split.
LONG_FILES = {
    "functions/core/config.py": "the run config's schema: every section's fields with their docstrings",
    "functions/core/permissions.py": "the permission table: every API call with its IAM permission and source",
}


def sources() -> list[str]:
    found = [p for folder in ("functions", "trainer") for p in (ROOT / folder).rglob("*.py")]
    return sorted(str(p.relative_to(ROOT)) for p in [*found, ROOT / "main.py"])


def test_no_source_file_is_longer_than_its_limit():
    long = {path: lines for path in sources() if (lines := (ROOT / path).read_text().count("\n")) > MAX_FILE_LINES}
    assert set(long) <= set(LONG_FILES), {p: n for p, n in long.items() if p not in LONG_FILES}


def test_no_function_is_longer_than_its_limit():
    long = []
    for path in sources():
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
