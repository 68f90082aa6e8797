"""The code the Ray job runs, and its fingerprint. The controller ships these files in the ConfigMap
mounted at /code/ and stamps the fingerprint on the RayJob; the job checks the mounted code carries
the same one before it trains (ConfigMap volumes update late)."""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The trainer package, and the contracts it shares with the controller (pydantic only): the run config
# and the result. The import contracts in pyproject.toml keep the trainer to these two.
SHIPPED = (
    "trainer",
    "functions/__init__.py",
    "functions/core/__init__.py",
    "functions/core/config.py",
    "functions/core/result.py",
)


def code_files(root: Path = ROOT) -> dict[str, bytes]:
    """The shipped sources keyed by their path under /code/ (e.g. trainer/train.py)."""
    files: dict[str, bytes] = {}
    for entry in SHIPPED:
        path = root / entry
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if "__pycache__" not in source.parts:
                files[source.relative_to(root).as_posix()] = source.read_bytes()
    return files


def code_sha256(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()
