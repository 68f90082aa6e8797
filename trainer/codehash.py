"""The code the Ray job runs, and its fingerprint. The controller ships these files in the ConfigMap
mounted at /code/ and stamps the fingerprint on the RayJob; the job checks the mounted code carries
the same one before it trains (ConfigMap volumes update late)."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINER = "trainer"


def shipped(root: Path = ROOT) -> list[Path]:
    """The trainer package and every module of the controller it needs: the modules its files import (lazily too),
    and theirs, with their packages' __init__.py. Derived, never listed by hand: a shared module that starts to
    import another (config.py importing gpu_shapes.py) ships it too, instead of failing with ImportError in a pod
    while every test on a full checkout passes (tests/integration/test_package.py imports the trainer from only
    these files)."""
    files = {p for p in (root / TRAINER).rglob("*.py") if "__pycache__" not in p.parts}
    todo = sorted(files)
    while todo:
        for module in _imported(todo.pop(), root):
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):
                package = root.joinpath(*parts[:depth])
                for candidate in (package / "__init__.py", package.with_suffix(".py")):
                    if candidate.is_file() and candidate not in files:
                        files.add(candidate)
                        todo.append(candidate)
    return sorted(files)


def _imported(source: Path, root: Path) -> set[str]:
    """The `functions.*` and `trainer.*` modules (or names in them) a file imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in ("functions", TRAINER)}


def code_files(root: Path = ROOT) -> dict[str, bytes]:
    """The shipped sources keyed by their path under /code/ (e.g. trainer/train.py)."""
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in shipped(root)}


def code_sha256(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()
