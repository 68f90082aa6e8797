"""The function source archive: everything the functions import, the trainer code for the ConfigMap,
and light pinned requirements."""

import zipfile

from functions.cli import main as cli
from trainer.codehash import code_files

HEAVY = ("torch", "ray", "transformers", "trl", "peft", "bitsandbytes", "datasets")


def test_package_builds_a_light_archive(tmp_path, capsys):
    output = tmp_path / "fn.zip"
    assert cli(["package", "-o", str(output)]) == 0
    report = capsys.readouterr().out
    assert "KiB zipped" in report
    with zipfile.ZipFile(output) as archive:
        names = set(archive.namelist())
        requirements = archive.read("requirements.txt").decode().split()
    assert {
        "main.py",
        "functions/handlers/launch.py",
        "functions/handlers/watch.py",
        "functions/adapters/gke.py",
        "functions/adapters/kube.py",
        "functions/core/decide.py",
        "functions/core/config.py",
        "requirements.txt",
    } <= names
    assert set(code_files()) <= names  # what the launch function ships into the ConfigMap
    assert not [n for n in names if n.startswith("functions/local/")]
    assert all("==" in r for r in requirements)
    assert not [r for r in requirements if r.split("==")[0].lower() in HEAVY]
    assert {r.split("==")[0] for r in requirements} >= {"functions-framework", "google-cloud-storage", "kubernetes"}
    assert output.stat().st_size < 200_000
    # Deterministic: the same sources give the same bytes (Terraform redeploys only on change).
    again = tmp_path / "again.zip"
    cli(["package", "-o", str(again)])
    assert again.read_bytes() == output.read_bytes()
