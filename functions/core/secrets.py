"""Secret scrubbing: the configured Hugging Face token and anything shaped like one are replaced in
every text that leaves the controller (logs, reasons, rejected configs, events).

What a terminal or log viewer shows is what is scrubbed: characters it does not display (controls, escape
sequences, zero-width and bidirectional marks) are first written as visible escapes (`\\x1b`, `\\u200b`), so
none of them can hide a token's fragments from the match and then join them on screen; a token is matched in
the forms logs quote it in (as is, JSON-escaped, repr), with such escapes allowed between its characters."""

from __future__ import annotations

import functools
import json
import re
import threading
import unicodedata
from typing import Any, TypeVar, cast

REDACTED = "[REDACTED]"
# Not displayed (or displayed by moving the cursor): C0/C1 controls, format characters (zero-width, bidi,
# soft hyphen), surrogates, private use, line and paragraph separators. Line breaks and tabs stay as they are.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_KEPT = frozenset("\n\t")
# One hidden character as visible() writes it; a terminal control sequence (CSI, OSC) whole, its introducer
# written so: `\x1b[0m` shows nothing on a terminal, so the text on either side of it reads as joined.
_ESCAPE = (
    r"(?:\\x1b\[[0-?]*[ -/]*[@-~]|\\x9b[0-?]*[ -/]*[@-~]|\\x1b\][^\\\n]*(?:\\x07|\\x1b\\\\)"
    r"|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|\\r)"
)
# Hugging Face user access tokens, even with hidden characters between their characters.
HF_TOKEN_PATTERN = re.compile(f"h{_ESCAPE}*f{_ESCAPE}*_(?:{_ESCAPE}*[A-Za-z0-9]){{20,}}")
_secrets: set[str] = set()
J = TypeVar("J")
_lock = threading.Lock()


def add_secret(value: str | None) -> None:
    if value:
        with _lock:
            _secrets.add(value)


def visible(text: str) -> str:
    """The text with every character a terminal would not display written as its escape."""
    if text.isprintable():  # the common case, fast: printable has no hidden character (nor \n, \t)
        return text
    # A table for the Basic Multilingual Plane (str.translate, in C), the rare characters beyond it by a regex: a log
    # of random bytes is never taken apart into one Python call per character.
    text = text.translate(_hidden_in_bmp())
    return _ASTRAL.sub(lambda run: "".join(_shown(c) for c in run.group()), text)


_ASTRAL = re.compile("[\U00010000-\U0010ffff]+")


@functools.cache
def _hidden_in_bmp() -> dict[int, str]:
    """Each hidden character of the Basic Multilingual Plane and its escape (built once, on the first hidden one)."""
    return {code: _shown(chr(code)) for code in range(0x10000) if _shown(chr(code)) != chr(code)}


def _shown(char: str) -> str:
    if char in _KEPT or unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")


@functools.lru_cache(maxsize=64)
def _pattern(secret: str) -> re.Pattern[str]:
    """The secret in every form a log quotes it in, with hidden characters allowed between its characters."""
    forms = {
        visible(secret),
        visible(json.dumps(secret)[1:-1]),
        visible(json.dumps(secret, ensure_ascii=False)[1:-1]),
        visible(repr(secret)[1:-1]),
    }
    spread = (f"{_ESCAPE}*".join(re.escape(c) for c in form) for form in sorted(forms, key=len, reverse=True))
    return re.compile("|".join(spread))


# Credentials an API error or a client can quote: an Authorization header's value (whatever its scheme), and
# Google's OAuth access tokens (ya29.) and refresh tokens (1//) wherever they stand.
CREDENTIAL_PATTERN = re.compile(
    r"(?i)(?<=authorization)(['\"]?\s*[:=]\s*['\"]?)(?:bearer|basic)?\s*[^\s'\",}]+"
    r"|\bbearer\s+[A-Za-z0-9._~+/=-]{8,}|\bya29\.[A-Za-z0-9._-]+|\b1//[A-Za-z0-9._-]{20,}"
)


# The tracking destinations' credentials where a log or an error quotes them by their variables' names (a W&B key
# is 40 or more characters of letters and digits, an MLflow token any text): whatever the value, it goes. Within
# one line, as redact_log's pieces need.
TRACKING_CREDENTIAL_PATTERN = re.compile(
    r"(?i)(\b(?:MLFLOW_TRACKING_(?:TOKEN|PASSWORD)|WANDB_API_KEY)['\"]?[ \t]*[:=][ \t]*['\"]?)[^\s'\",}]+"
)


def redact(text: str) -> str:
    text = visible(text)
    with _lock:
        secrets = list(_secrets)
    for secret in secrets:
        text = _pattern(secret).sub(REDACTED, text)
    text = CREDENTIAL_PATTERN.sub(lambda m: (m.group(1) or "") + REDACTED, text)  # an Authorization's separator kept
    text = TRACKING_CREDENTIAL_PATTERN.sub(lambda m: m.group(1) + REDACTED, text)
    return HF_TOKEN_PATTERN.sub(REDACTED, text)


LOG_CHUNK = 1 << 20  # a log is redacted in pieces of about this many characters, each ending at a line's end
# What a credential's match may go on from across line breaks (CREDENTIAL_PATTERN's `\s*`): a piece never ends
# after one (and the spaces after it), so each match lies within one piece. Nothing else the patterns match spans a
# line break (an escape sequence's text is cut at one: _ESCAPE).
_OPENING = re.compile(r"""(?i)(?:authorization['"]?(?:\s*[:=]\s*['"]?)?|bearer|basic)\Z""")


def redact_log(text: str, chunk: int = LOG_CHUNK) -> str:
    """A log redacted a piece at a time: the same result as redact() of the whole (each piece ends at a line's end
    that no match crosses: _piece_end), without its per-character work ever holding the whole log."""
    pieces = []
    start = 0
    while start < len(text):
        end = _piece_end(text, start + chunk)
        pieces.append(redact(text[start:end]))
        start = end
    return "".join(pieces)


def _piece_end(text: str, at: int) -> int:
    """The first line end from `at` on where a piece may end (its whole text's end when there is none): the next
    line starts with no space, and what comes before, blank lines and spaces aside, is no credential's opening."""
    while True:
        found = text.find("\n", at)
        if found < 0:
            return len(text)
        end = found + 1
        if end == len(text):
            return end
        if not text[end].isspace():
            last = found
            while last > 0 and text[last - 1].isspace():  # each run of spaces is passed over once: O(n) in all
                last -= 1
            if not _OPENING.search(text, max(0, last - 64), last):
                return end
        at = end


def redact_json(value: J) -> J:
    """A JSON value with every string in it (keys too) redacted: the structure stays valid whatever a secret
    looks like."""
    if isinstance(value, str):
        return cast(J, redact(value))
    if isinstance(value, dict):
        return cast(J, {redact(str(k)): redact_json(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return cast(J, [redact_json(v) for v in value])
    return value


# What a field's name says is a secret (an operator or nightly key attribute, a cancel token, a password): its
# value is redacted by name, whether or not this instance knows the value (a rotated key, another deployment's).
_SECRET_WORDS = "key|token|secret|password|credential"
SECRET_NAME = re.compile(f"(?i){_SECRET_WORDS}")
_NAMED_FIELD = re.compile(
    rf"""(?ix)
    ("?[\w.-]*(?:{_SECRET_WORDS})[\w.-]*"?\s*[:=]\s*)  # a secret's name and its separator
    ("(?:[^"\\]|\\.)*"|[^\s,;}}\]]+)  # its value: quoted, or up to the next delimiter
    """
)


def redact_kept(text: str) -> str:
    """A text kept for people to read (a rejected event's body): every value whose field's name says it is a
    secret, whatever the value, then every secret and credential `redact` knows. JSON stays JSON."""
    try:
        return json.dumps(redact_json(_named_redacted(json.loads(text))))
    except ValueError:
        return redact(
            _NAMED_FIELD.sub(
                lambda m: m.group(1) + ('"' + REDACTED + '"' if m.group(2).startswith('"') else REDACTED), text
            )
        )


def _named_redacted(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and SECRET_NAME.search(k) else _named_redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_named_redacted(v) for v in value]
    return value
