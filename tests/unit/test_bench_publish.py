"""bench/publish.py: a bench's tables reach docs/performance.md as the bench printed them, with what measured them."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def publisher():
    spec = importlib.util.spec_from_file_location("bench_publish", ROOT / "bench" / "publish.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = """
round 1: 3.1 s
round 2: 3.0 s
what the first table is
| arm | s |
|---|---|
| a | 3.0 |
the second
| x |
|---|
| 1 |
done
"""


def test_the_bench_output_tables_and_their_captions_replace_the_block_and_nothing_else(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("# Page\n\nbefore\n<!-- bench:demo -->\nold figures\n<!-- /bench:demo -->\nafter\n")
    script = tmp_path / "bench.py"
    script.write_text(f"print({BENCH!r})")
    assert publisher().main(["demo", "--page", str(page), "--", sys.executable, str(script), "--repeats", "5"]) == 0
    text = page.read_text()
    block = text.split("<!-- bench:demo -->\n", 1)[1].split("<!-- /bench:demo -->", 1)[0]
    provenance, *rest = block.splitlines()
    assert provenance.startswith("Measured at commit ") and provenance.endswith(f"`python {script} --repeats 5`")
    assert rest == [
        "",
        "what the first table is",
        "",
        "| arm | s |",
        "|---|---|",
        "| a | 3.0 |",
        "",
        "the second",
        "",
        "| x |",
        "|---|",
        "| 1 |",
    ]
    assert text.startswith("# Page\n\nbefore\n") and text.endswith("<!-- /bench:demo -->\nafter\n")


def test_a_failed_bench_leaves_the_page_as_it_was(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("<!-- bench:demo -->\nold\n<!-- /bench:demo -->\n")
    assert publisher().main(["demo", "--page", str(page), "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert page.read_text() == "<!-- bench:demo -->\nold\n<!-- /bench:demo -->\n"


def test_every_block_on_the_page_names_its_commit_and_command():
    page = (ROOT / "docs" / "performance.md").read_text()
    blocks = re.findall(r"^<!-- bench:(\S+) -->\n(.*?)^<!-- /bench:\1 -->$", page, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 8, "docs/performance.md lost bench blocks"
    for name, body in blocks:
        assert body.startswith("Measured at commit "), name
        assert "`python bench/" in body.splitlines()[0] or "`bash bench/" in body.splitlines()[0], name
