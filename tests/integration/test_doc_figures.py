"""The sizes the docs state are the ones the tools say (issue 67: README's `.venv` and deploy.md's package were
written by hand and had drifted). Each figure is read from its page and compared with the tool's own measure:
`du -sh` as `./dev setup` says it, and `raytune package`'s line."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLACK = 0.15  # a dependency's patch release or a module more moves a figure a little; a stale one is off by more


def in_bytes(figure: str) -> float:
    """`2.7G` (du -h) or `247 KiB` as bytes."""
    number, unit = re.fullmatch(r"([0-9.]+)\s*([KMGT])(?:i?B)?", figure.strip()).groups()
    return float(number) * 1024 ** "KMGT".index(unit) * 1024


def test_readmes_venv_size_is_what_setup_says():
    venv = Path(sys.prefix)
    if venv.parent != ROOT or not (venv / "bin" / "raytune").exists():
        pytest.skip("not the repository's own .venv: its size is set-up's to say")
    if not metadata.version("torch").endswith("+cpu"):
        pytest.skip("README's figure is torch's CPU build's; this .venv has a CUDA build (6-7 GB more)")
    [stated] = re.findall(r"Set-up ends by saying what `\.venv` holds: (\S+) here", (ROOT / "README.md").read_text())
    said = subprocess.run(["du", "-sh", str(venv)], capture_output=True, text=True, check=True).stdout.split()[0]
    assert abs(in_bytes(stated) - in_bytes(said)) <= SLACK * in_bytes(said), (stated, said)
    assert 'holds $(du -sh "$VENV"' in (ROOT / "dev").read_text(), "set-up says the size the README states"


def test_deploys_package_size_is_what_package_says(tmp_path):
    [stated] = re.findall(r"raytune-functions\.zip \((\S+ KiB) as it says", (ROOT / "docs" / "deploy.md").read_text())
    raytune = Path(sys.executable).parent / "raytune"
    out = subprocess.run(
        [str(raytune), "package", "-o", str(tmp_path / "fn.zip")], capture_output=True, text=True, check=True
    ).stdout
    [said] = re.findall(r"([0-9.]+ KiB) zipped", out)
    assert abs(in_bytes(stated) - in_bytes(said)) <= SLACK * in_bytes(said), (stated, said)
