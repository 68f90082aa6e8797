"""Redaction and cancel digests hold for any input (issue 39): properties over arbitrary tokens, digests and
texts with control characters, terminal escape sequences, line breaks and Unicode."""

from __future__ import annotations

import contextlib
import json
import re
import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from functions.core import secrets
from functions.core.policy import Policy, cancel_digest, digest_problem
from functions.core.secrets import REDACTED, redact, redact_json, visible

pytestmark = pytest.mark.unit

# What a terminal does not display, or displays by moving the cursor (so fragments around it join on screen).
HIDDEN = st.sampled_from(
    [
        *("\x1b", "\x1b[0m", "\x1b[2K", "\x1b]0;title\x07", "\r", "\b", "\x00", "\x7f", "\x9b"),
        *("\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\u2028", "\ue000"),
    ]
)
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
TOKENS = st.text(st.characters(exclude_categories=("Cs",)), min_size=8, max_size=40)
# A hidden character as written out, or a whole terminal control sequence (CSI, OSC) so written.
ESCAPES = re.compile(
    r"\\x1b\[[0-?]*[ -/]*[@-~]|\\x9b[0-?]*[ -/]*[@-~]|\\x1b\][^\\]*\\x07"
    r"|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|\\r"
)


@contextlib.contextmanager
def registered(token: str):
    """The registry is the process's: each example adds its own token and leaves it as it found it."""
    before = set(secrets._secrets)
    secrets.add_secret(token)
    try:
        yield
    finally:
        secrets._secrets.clear()
        secrets._secrets.update(before)


def on_screen(text: str) -> str:
    """What a reader of the redacted text can put together: the text with its hidden characters dropped and
    their written escapes dropped too (so fragments on either side of one read as joined)."""
    return ESCAPES.sub("", "".join(c for c in text if c == visible(c)))


def split(token: str, cuts: list[int], hidden: list[str]) -> str:
    points = sorted({c % len(token) for c in cuts} - {0})
    pieces = [token[a:b] for a, b in zip([0, *points], [*points, len(token)], strict=True)]
    return "".join(p + (hidden[i % len(hidden)] if i < len(pieces) - 1 else "") for i, p in enumerate(pieces))


@settings(deadline=None)  # the first example compiles the token's pattern
@given(
    token=TOKENS,
    before=ANY_TEXT,
    after=ANY_TEXT,
    cuts=st.lists(st.integers(0, 40), max_size=6),
    hidden=st.lists(HIDDEN, min_size=1, max_size=4),
)
def test_a_redacted_text_shows_no_token_however_its_fragments_are_separated(token, before, after, cuts, hidden):
    shown = on_screen(visible(token))
    # A token that shows as text the rest already shows (it differs only in hidden characters) cannot be told apart.
    assume(shown and REDACTED not in token and shown not in on_screen(visible(before + after)))
    with registered(token):
        out = redact(before + split(token, cuts, hidden) + after)
    assert all(c == visible(c) for c in out), "nothing a terminal would hide or act on is left"
    assert shown not in on_screen(out)


@settings(deadline=None)
@given(token=TOKENS, text=ANY_TEXT)
def test_a_token_quoted_as_json_or_repr_is_redacted_and_json_stays_json(token, text):
    assume(REDACTED not in token)
    entry = {"message": text + token + text, "exception": repr(token), token: [token, 1]}
    with registered(token):
        line, text_line = json.dumps(redact_json(entry)), redact(json.dumps(entry))
    assert json.loads(line)  # still one JSON object
    for form in (token, json.dumps(token)[1:-1], repr(token)[1:-1]):
        assert visible(form) not in line and visible(form) not in text_line


@given(
    body=st.text(string.ascii_letters + string.digits, min_size=34, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    hidden=st.lists(HIDDEN, min_size=1, max_size=3),
)
def test_anything_shaped_like_a_hugging_face_token_is_redacted_unregistered(body, cuts, hidden):
    token = "hf_" + body
    out = redact("token=" + split(token, cuts, hidden) + " end")
    assert on_screen(token) not in on_screen(out) and REDACTED in out


@given(st.text(max_size=80) | st.binary(max_size=70).map(lambda b: b.hex()) | st.none() | st.integers())
def test_a_digest_is_accepted_only_in_its_exact_canonical_form(digest):
    canonical = isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef")
    assert (digest_problem(digest) is None) == (canonical or digest is None)


@pytest.mark.parametrize("near", ["A" * 64, "a" * 64 + "\n", " " + "a" * 64, "a" * 63, "０" * 64, "a" * 65])
def test_near_misses_of_a_digest_are_refused(near):
    assert digest_problem(near) is not None


@given(token=st.text(max_size=40), other=st.text(max_size=40))
def test_only_the_token_whose_digest_a_launch_carried_cancels_its_run(token, other):
    """Any token (lone surrogates too, which JSON allows) is judged without an error."""
    digest = cancel_digest(token)
    assert digest_problem(digest) is None
    policy = Policy(operator_key="k" * 40)
    assert policy.may_cancel({"cancel_digest": digest}, token, {})
    assert policy.may_cancel({"cancel_digest": digest}, other, {}) == (cancel_digest(other) == digest)
    assert not policy.may_cancel({"cancel_digest": digest}, None, {})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["hf_" + "A1b2" * 6, "\n", "\t", "\x1b[0m", "\u200b", "é", "█", "secret-value-0123"]),
            st.text(max_size=12),
        ),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=40),
)
def test_a_log_redacted_in_pieces_is_the_log_redacted_whole(parts, chunk):
    secrets.add_secret("secret-value-0123")
    text = "".join(parts)
    original = secrets.LOG_CHUNK
    secrets.LOG_CHUNK = chunk  # pieces as small as a line or a few characters
    try:
        assert secrets.redact_log(text) == secrets.redact(text)
    finally:
        secrets.LOG_CHUNK = original


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=50))
def test_a_logs_tail_is_its_last_bytes_from_a_whole_line(data, limit, piece):
    from functions.core.joblog import tail

    kept = tail((data[i : i + piece] for i in range(0, len(data), piece)), limit)
    if len(data) <= limit:
        assert kept == data
    else:
        last = data[-limit:]
        # the cut line is dropped whole; where no line starts in them, nothing is kept
        assert kept == (last[last.find(b"\n") + 1 :] if b"\n" in last else b"")


def test_a_kept_text_loses_every_value_named_as_a_secret():
    from functions.core.secrets import redact_kept

    kept = json.loads(redact_kept(json.dumps({"a": {"x-api-key": "v1", "Token": 7, "list": [{"password": "p"}]}})))
    assert kept == {"a": {"x-api-key": "[REDACTED]", "Token": "[REDACTED]", "list": [{"password": "[REDACTED]"}]}}
    text = redact_kept('{"broken": 1, "raytune-operator-key": "abc\\"def", key=plain; other=fine')
    assert "abc" not in text and "def" not in text and "plain" not in text and "other=fine" in text
    # A secret-named field is redacted whatever its value holds: a list or an object too (issue 63).
    nested = json.loads(redact_kept(json.dumps({"operator_keys": ["k1", "k2"], "api_token": {"value": "t"}})))
    assert nested == {"operator_keys": "[REDACTED]", "api_token": "[REDACTED]"}


# What a log holds around a piece's end: credentials whose value is on the next line, tokens, spaces, blank lines.
LOG_PARTS = st.lists(
    st.sampled_from(
        [
            "Authorization:",
            "authorization",
            '"Authorization": "',
            "=",
            ": ",
            "Bearer",
            "bearer ",
            "Basic",
            "abcdefgh1234",
            "ya29.a0AfH6SM",
            "hf_TestTokenDoNotLeak0123456789abcdef",
            "hf_ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
            " ",
            "\t",
            "\n",
            "\n\n",
            "\r\n",
            "\x1b[0m",
            "line of text",
            "é",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=600)
@given(text=LOG_PARTS, chunk=st.integers(1, 60))
def test_a_log_redacted_in_pieces_is_the_whole_redacted_wherever_its_pieces_end(text, chunk):
    secrets.add_secret("hf_TestTokenDoNotLeak0123456789abcdef")
    assert secrets.redact_log(text, chunk) == redact(text)
