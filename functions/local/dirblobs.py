"""The local bucket as fake-gcs-server keeps it on disk (`<workdir>/gcs/<bucket>/<object>`), read without
starting the server: the operator commands read run records of `raytune local` runs, live or ended."""

from __future__ import annotations

import builtins
import datetime as dt
from pathlib import Path

from functions.adapters.gcs import Listed
from functions.core.errors import PermanentError


class DirBlobs:
    def __init__(self, root: Path):
        self.root = root

    def read(self, path: str, *, limit: int | None = None) -> tuple[bytes, int] | None:
        """At most limit + 1 bytes (enough to tell it is too large)."""
        file = self.root / path
        try:
            with file.open("rb") as handle:
                return handle.read(-1 if limit is None else limit + 1), file.stat().st_mtime_ns
        except (FileNotFoundError, IsADirectoryError):
            return None

    def write(self, path: str, data: bytes, if_generation_match: int, metadata: dict[str, str] | None = None) -> int:
        raise PermanentError("the local bucket is read-only outside `raytune local`")

    def copy(self, source: str, destination: str) -> None:
        raise PermanentError("the local bucket is read-only outside `raytune local`")

    def delete(self, path: str) -> None:
        raise PermanentError("the local bucket is read-only outside `raytune local`")

    def listing(self, prefix: str) -> builtins.list[Listed]:
        """Objects as fake-gcs-server keeps them: no metadata (readers read the objects themselves)."""
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return []
        found = []
        for file in folder.iterdir():
            name = file.relative_to(self.root).as_posix()
            if file.is_file() and name.startswith(prefix):
                stat = file.stat()
                found.append(Listed(name, dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC), stat.st_mtime_ns, {}))
        return sorted(found)

    def list(self, prefix: str) -> builtins.list[str]:
        return [entry.name for entry in self.listing(prefix)]
