"""Files where the run's storage is: gs:// (the GCS emulator when STORAGE_EMULATOR_HOST is set, as the
google-cloud clients do) or a local path, through pyarrow's filesystems."""

from __future__ import annotations

import os
import tempfile


def filesystem(uri: str):
    """(pyarrow filesystem, path) for a gs:// URI or a local path."""
    import pyarrow.fs as pafs

    if not uri.startswith("gs://"):
        return pafs.LocalFileSystem(), uri
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        scheme, _, host = emulator.rpartition("://")
        fs = pafs.GcsFileSystem(anonymous=True, scheme=scheme or "http", endpoint_override=host)
        return fs, uri.removeprefix("gs://")
    return pafs.FileSystem.from_uri(uri)


def write_file(uri: str, data: bytes) -> None:
    """`data` as the file at `uri`, its folder made first (a local folder; on GCS only a marker object)."""
    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(data)


def local_folder(uri: str) -> str:
    """A folder (an adapter) as a local path: gs:// ones are copied to a temporary folder first."""
    if not uri.startswith("gs://"):
        return uri
    import pyarrow.fs as pafs

    fs, path = filesystem(uri.rstrip("/"))
    target = tempfile.mkdtemp(prefix="raytune-adapter-")
    pafs.copy_files(path, target, source_filesystem=fs)
    return target
