"""`raytune package`: the Cloud Functions source archive (what Terraform deploys).

main.py, the controller package, the trainer code it ships into the ConfigMap, and a requirements.txt
with the functions' dependencies only, pinned to the versions tested here: no torch, ray or transformers.
"""

from __future__ import annotations

import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from trainer.codehash import ROOT, code_files

# Only the embedded local default and the command line need these; the functions never import them (main.py
# reaches the CLI only when run as a script, in a terminal).
NOT_DEPLOYED = ("functions/local/", "functions/cli/")
HEAVY = {"torch", "ray", "transformers", "trl", "peft", "bitsandbytes", "datasets", "accelerate"}


def _name(requirement: str) -> str:
    for separator in "[=<>!~ ;":
        requirement = requirement.split(separator, 1)[0]
    return requirement.strip()


def requirements(root: Path = ROOT) -> list[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    pinned = []
    for requirement in project["optional-dependencies"]["functions"]:
        name = _name(requirement)
        try:
            pinned.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pinned.append(requirement)
    return sorted(pinned, key=str.lower)


def sources(root: Path = ROOT) -> dict[str, bytes]:
    files = {"main.py": (root / "main.py").read_bytes()}
    for path in sorted((root / "functions").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not relative.startswith(NOT_DEPLOYED) and "__pycache__" not in path.parts:
            files[relative] = path.read_bytes()
    files.update(code_files(root))
    return files


def build(output: Path, root: Path = ROOT) -> dict:
    files = sources(root)
    reqs = requirements(root)
    heavy = HEAVY & {_name(r).lower() for r in reqs}
    if heavy:
        raise RuntimeError(f"the functions' requirements must stay light, found {sorted(heavy)}")
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(files.items()):
            # A fixed timestamp: the same sources give the same archive (and the same Terraform object name).
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
        info = zipfile.ZipInfo("requirements.txt", date_time=(2020, 1, 1, 0, 0, 0))
        archive.writestr(info, "\n".join(reqs) + "\n")
    return {
        "path": str(output),
        "files": len(files) + 1,
        "bytes": output.stat().st_size,
        "source_bytes": sum(len(c) for c in files.values()),
        "requirements": reqs,
    }
