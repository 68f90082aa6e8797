"""The function source archive: everything the functions import, the trainer code for the ConfigMap,
and light pinned requirements."""

import ast
import zipfile

from functions.cli import main as cli
from trainer.codehash import ROOT, code_files

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
    assert not [n for n in names if n.startswith(("functions/local/", "functions/cli/"))]
    assert all("==" in r for r in requirements)
    assert not [r for r in requirements if r.split("==")[0].lower() in HEAVY]
    assert {r.split("==")[0] for r in requirements} >= {"functions-framework", "google-cloud-storage", "kubernetes"}
    assert output.stat().st_size < 300_000  # sources alone (about 250 KB): no library is vendored in (one is MBs)
    # Deterministic: the same sources give the same bytes (Terraform redeploys only on change).
    again = tmp_path / "again.zip"
    cli(["package", "-o", str(again)])
    assert again.read_bytes() == output.read_bytes()


def _imported(source: str) -> set[str]:
    """Every module a file imports anywhere (function bodies too: a client imported only where it is needed is
    imported in the cloud all the same), and for `from a import b` both `a` and `a.b` (b may be a module), leaving
    out what runs only as a script (`if __name__ == "__main__":`)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _imports(source: str) -> set[str]:
    """The functions.* and trainer.* modules a file imports."""
    return {name for name in _imported(source) if name.split(".")[0] in ("functions", "trainer")}


def test_everything_the_deployed_functions_import_is_in_the_archive(tmp_path):
    """The archive leaves out what only the CLI and the local default use: every module of this repository that
    its own files import (lazily too) is in it."""
    output = tmp_path / "fn.zip"
    assert cli(["package", "-o", str(output)]) == 0
    with zipfile.ZipFile(output) as archive:
        sources = {n: archive.read(n).decode() for n in archive.namelist() if n.endswith(".py")}
    shipped = {n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in sources}

    def is_module(dotted: str) -> bool:  # `from a.b import c`: c may be a module or a name in a.b
        path = ROOT.joinpath(*dotted.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    missing = {
        (name, module)
        for name, source in sources.items()
        for module in _imports(source)
        if is_module(module) and module not in shipped
    }
    assert not missing, sorted(missing)
    assert "functions.cli" not in shipped and "functions.local" not in shipped


def test_the_trainer_imports_from_only_the_files_the_configmap_ships(tmp_path):
    """What a Ray pod has is the ConfigMap's files under /code (issue 41): every trainer module imports from them
    alone. config.py came to import gpu_shapes.py, which the hand-made list did not ship: every cloud job would
    have failed with ModuleNotFoundError while every test on a full checkout passed."""
    import subprocess
    import sys

    for name, content in code_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    modules = sorted(n.removesuffix(".py").replace("/", ".") for n in code_files() if n.startswith("trainer/"))
    script = (
        "import importlib, sys, functions\n"
        f"assert functions.__file__.startswith({str(tmp_path)!r}), functions.__file__\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name.removesuffix('.__init__'))\n"
        "from functions.core.config import RunConfig\n"
        "RunConfig()  # its lazy imports too\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    controller = [n for n in code_files() if n.startswith("functions/")]
    assert all(n.startswith("functions/core/") or n == "functions/__init__.py" for n in controller), controller
    # fields.py joined with the one dotted-field setter (issue 54), release.py with the version stamp (issue 63),
    # tracking.py with the config's tracking section and errors.py, secrets.py with the trackers' redacted failures
    # (issue 66), capacity.py with the capacity kinds' table (issue 65); tests/unit/test_contracts.py names each file
    assert len(controller) <= 14, f"the trainer now takes {controller} from the controller: keep it to the contracts"


def _third_party(source: str) -> set[str]:
    """The top-level modules of other packages a file imports."""
    import sys

    tops = {name.split(".")[0] for name in _imported(source)}
    return {m for m in tops if m not in sys.stdlib_module_names and m not in ("functions", "trainer", "main")}


def _closure(names: set[str]) -> set[str]:
    """Distributions and everything they require (extras left out: pip installs none unasked)."""
    import re
    from importlib import metadata

    seen: set[str] = set()
    todo = [n.lower().replace("_", "-") for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" not in requirement:
                todo.append(re.split(r"[\s\[=<>!~;(]", requirement, maxsplit=1)[0].lower().replace("_", "-"))
    return seen


def test_every_package_the_deployed_functions_import_is_installed_by_its_requirements(tmp_path):
    """Cloud Build installs the archive's requirements.txt and nothing else: each other package a deployed file
    imports, lazily too, is named there or required by one that is. The champion alias's MLflow client was
    imported by the watch (functions/adapters/registry.py) with no MLflow in the requirements: every promotion in
    the cloud would have said "champion alias not moved: No module named 'mlflow'" while every test here passed."""
    from importlib import metadata

    output = tmp_path / "fn.zip"
    assert cli(["package", "-o", str(output)]) == 0
    with zipfile.ZipFile(output) as archive:
        # trainer/: the ConfigMap's files, which the Ray pods import, never the functions
        sources = {n: archive.read(n).decode() for n in archive.namelist() if n.endswith(".py")}
        sources = {n: s for n, s in sources.items() if not n.startswith("trainer/")}
        requirements = archive.read("requirements.txt").decode().split()
    installed = _closure({r.split("==")[0] for r in requirements})
    providers = metadata.packages_distributions()
    missing = {
        (name, module)
        for name, source in sources.items()
        for module in _third_party(source)
        if not {d.lower().replace("_", "-") for d in providers.get(module, [module])} & installed
    }
    assert not missing, sorted(missing)
