"""Fingerprint of the trainer code: the controller stamps it on the ConfigMap and RayJob,
and the job checks the code mounted at /code/ carries the same one before it trains."""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def package_files(root: Path = PACKAGE_DIR) -> dict[str, bytes]:
    """The trainer package's Python sources, keyed by their path under /code/ (e.g. trainer/train.py)."""
    return {
        f"{root.name}/{path.relative_to(root).as_posix()}": path.read_bytes()
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def code_sha256(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()
