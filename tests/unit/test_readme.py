"""README is a reader's document: at most 300 lines, and every relative link in it and in docs/ leads to a file
that exists (an anchor to a heading that exists). The config reference is the generated page alone."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def prose(page: Path) -> str:
    """The page without its code: fenced blocks and `code spans` hold patterns, not links."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def test_the_readme_is_at_most_300_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing_anchor = bool(anchor) and file.suffix == ".md" and file.exists() and anchor not in anchors(file)
        if not file.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_the_config_fields_are_documented_once_in_the_generated_reference():
    """No hand-written table of config sections beside docs/config-reference.md (it went stale: it lacked sweep,
    evaluation, export and capacity)."""
    for page in PAGES:
        if page.name == "config-reference.md":
            continue
        rows = re.findall(r"^\| `(model|dataset|training|scaling|cluster|deadlines)` \|", page.read_text(), re.M)
        assert not rows, f"{page.name} tabulates config sections: {rows}"


CONSOLE = re.compile(r"^```console\n(.*?)^```", flags=re.M | re.S)


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "local.md"], ids=lambda p: p.name)
def test_the_validate_examples_run_as_written(page, capsys):
    """Each `raytune validate` shown in a console block prints what the page shows (its first lines)."""
    from functions.cli import main

    shown = [block for block in CONSOLE.findall(page.read_text()) if "raytune validate" in block]
    assert shown, page
    for block in shown:
        for command, said in re.findall(r"^\$ \.venv/bin/raytune (validate \S+)\n((?:(?!\$ ).*\n)*)", block, re.M):
            cwd = os.getcwd()
            os.chdir(ROOT)
            try:
                code = main(command.split())
            finally:
                os.chdir(cwd)
            out = capsys.readouterr()
            printed = (out.out + out.err).splitlines()
            expected = said.splitlines()
            assert printed[: len(expected)] == expected, (command, printed)
            assert code == (2 if expected[0].startswith("error:") else 0)
