"""Tables that stay readable in the terminal they are printed to. A pipe or a file gets the wide form (one row a
line, for grep and scripts: targets.console's 200 columns); a terminal narrower than the wide form gets a form
that fits it, never a row cut or wrapped mid-word by the terminal."""

from __future__ import annotations

import shutil
import string
import sys
import textwrap
from collections.abc import Iterable, Sequence

MIN_TEXT = 24  # a wrapped description narrower than this goes under its key instead of beside it


def terminal_width() -> int | None:
    """The terminal's columns, or None when the output is not a terminal (the wide form then)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def grouped(rows: Iterable[tuple[str, str, str, str]], width: int) -> str:
    """Rows of (who, on, key, text) as one heading per (who, on) with its keys under it, each key's text wrapped
    beside it (or under it where the key leaves too little room) within `width`."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for who, on, key, text in rows:
        groups.setdefault((who, on), []).append((key, text))
    lines: list[str] = []
    for (who, on), entries in groups.items():
        lines.append(f"{who} on {on}")
        key_width = max(len(key) for key, _ in entries)
        for key, text in entries:
            room = width - (2 + key_width + 2)
            if room >= MIN_TEXT:
                wrapped = textwrap.wrap(text, room) or [""]
                lines.append(f"  {key.ljust(key_width)}  {wrapped[0]}".rstrip())
                lines += [" " * (4 + key_width) + more for more in wrapped[1:]]
            else:
                lines.append(f"  {key}")
                lines += textwrap.wrap(
                    text, max(width - 6, MIN_TEXT), initial_indent=" " * 6, subsequent_indent=" " * 6
                )
    return "\n".join(lines)


def natural_widths(rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's widest line over these rows (a heading row among them)."""
    columns = range(max((len(row) for row in rows), default=0))
    return [max(max(map(len, row[c].splitlines() or [""])) for row in rows) for c in columns]


def table_width(widths: Iterable[int]) -> int:
    """A rich table's width with columns this wide: 3 a column (padding and a border), and 1."""
    return sum(w + 3 for w in widths) + 1


def letters(count: int) -> list[str]:
    """Short column names for runs whose ids do not fit as headings: A, B, ... Z, then AA, AB, ..."""
    alphabet = string.ascii_uppercase
    return [alphabet[i] if i < 26 else alphabet[i // 26 - 1] + alphabet[i % 26] for i in range(count)]
