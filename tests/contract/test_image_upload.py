"""What Cloud Build receives from `raytune image`, asked of gcloud itself: `gcloud meta list-files-for-upload`
runs the same .gcloudignore code as `gcloud builds submit`. Every source of every COPY/ADD in
image/Dockerfile must be among the uploaded files, and the image must carry the code the ConfigMap ships."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from trainer.codehash import ROOT, SHIPPED, code_files

DOCKERFILE = ROOT / "image" / "Dockerfile"


def uploaded(source: Path) -> set[str]:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("gcloud is not installed: the upload contract needs gcloud's own ignore code")
    out = subprocess.run(
        [gcloud, "meta", "list-files-for-upload", str(source)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def copy_sources(dockerfile: str) -> list[str]:
    """The build-context paths of every COPY and ADD (shell and JSON forms, flags skipped, lines joined)."""
    sources = []
    for line in dockerfile.replace("\\\n", " ").splitlines():
        words = line.strip().split(maxsplit=1)
        if len(words) < 2 or words[0].upper() not in ("COPY", "ADD"):
            continue
        rest = words[1].strip()
        args = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        args = [a for a in args if not a.startswith("--")]
        sources += args[:-1]  # the last one is the destination
    return sources


def is_sent(path: str, files: set[str]) -> bool:
    path = path.rstrip("/")
    return path in files or any(f.startswith(f"{path}/") for f in files)


def test_every_dockerfile_input_is_uploaded():
    files = uploaded(ROOT)
    sources = copy_sources(DOCKERFILE.read_text())
    assert sources, "no COPY in image/Dockerfile"
    missing = [s for s in sources if not is_sent(s, files)]
    assert not missing, f"gcloud builds submit would not send {missing} (sent: {sorted(files)})"


def test_the_image_carries_the_code_the_configmap_ships():
    files = uploaded(ROOT)
    sources = copy_sources(DOCKERFILE.read_text())
    shipped = set(code_files())
    copied = {f for f in shipped if any(f == s or f.startswith(f"{s.rstrip('/')}/") for s in sources)}
    assert copied == shipped, f"the ConfigMap ships {sorted(shipped - copied)} that image/Dockerfile does not copy"
    assert shipped <= files, f"not uploaded: {sorted(shipped - files)}"
    assert {s.split("/")[0] for s in SHIPPED} == {"trainer", "functions"}


def test_the_upload_leaves_out_what_the_build_does_not_need():
    files = uploaded(ROOT)
    assert not {f for f in files if f.startswith((".venv", "tests/", "terraform/", ".git/", "build/", ".raytune"))}
    assert not any("__pycache__" in f for f in files)
    # The controller's adapters and handlers stay out (the image holds the trainer and its two contracts).
    assert not {f for f in files if f.startswith(("functions/adapters/", "functions/handlers/", "functions/cli/"))}


def test_gitignore_rules_apply_as_gcloud_reads_them(tmp_path):
    """The pattern this repository depends on, on a tree of its own: a file under an excluded folder comes
    back only when its folder is re-included first (what the old .gcloudignore got wrong)."""
    for name in ("keep/sub/a.py", "keep/sub/b.py", "keep/other.py", "drop.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / ".gcloudignore").write_text("*\n!keep/sub/a.py\n")
    assert uploaded(tmp_path) == set()  # the old pattern: nothing under keep/ comes back
    (tmp_path / ".gcloudignore").write_text("/*\n!/keep/\n/keep/*\n!/keep/sub/\n/keep/sub/*\n!/keep/sub/a.py\n")
    assert uploaded(tmp_path) == {"keep/sub/a.py"}
