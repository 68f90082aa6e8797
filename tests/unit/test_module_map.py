"""README's module map is the tree (issue 41): every module of functions/ and trainer/ is named in it, under its
package, and every module it names exists; as the schema drift test holds the config reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("functions/core", "functions/adapters", "functions/handlers", "functions/local", "functions/cli", "trainer")


def module_map() -> dict[str, set[str]]:
    """The modules the README's map names, by package (a package's lines run until the next one starts)."""
    text = ROOT.joinpath("README.md").read_text()
    block = text[text.index("```\nfunctions/\n") : text.index("```", text.index("```\nfunctions/\n") + 3)]
    named: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        if heading := re.match(r"^\s*(core|adapters|handlers|local|cli)/\s", line + " "):
            current = f"functions/{heading[1]}"
        elif line.startswith("trainer/"):
            current = "trainer"
        if current:
            named.setdefault(current, set()).update(re.findall(r"\b(\w+)\.py\b", line))
    return named


@pytest.mark.parametrize("package", PACKAGES)
def test_the_readme_names_every_module_and_only_modules_that_exist(package):
    tree = {p.stem for p in ROOT.joinpath(package).glob("*.py") if p.stem != "__init__"}
    named = module_map().get(package, set()) - {"__init__"}
    assert not tree - named, f"README's module map misses {sorted(tree - named)} of {package}"
    assert not named - tree, f"README's module map names {sorted(named - tree)}, which {package} does not have"


def test_the_architecture_names_every_action_the_decision_returns():
    """docs/architecture.md's "One decision function" lists decide's actions: all of them, as the enum has them."""
    from functions.core.decide import Action

    text = ROOT.joinpath("docs", "architecture.md").read_text()
    paragraph = text[text.index("**One decision function.**") : text.index("Handlers run it in a")]
    named = set(re.findall(r"`([A-Z_]+)`", paragraph))
    assert named == {action.name for action in Action}
