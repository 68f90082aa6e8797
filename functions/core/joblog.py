"""Reading a Ray job's driver log for people: progress events, and the root cause of a failure as one
short line (no colours, no Ray prefixes)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator

from pydantic import ValidationError

from functions.core.result import PHASE_MARKER, PROGRESS_MARKER, Phase, Progress

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "(RayTrainWorker pid=123, ip=10.0.0.1)", "[2026-12-02 10:00:00,123 E 123 456]", "(raylet) ", repeat counts.
RAY_PREFIX = re.compile(
    r"^(\s*(\([^()]*(pid=|raylet|gcs_server)[^()]*\)|\[\d{4}-\d\d-\d\d [^\]]*\]|\[repeated \d+x[^\]]*\]))+\s*"
)
EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Invalid))(\((?P<inner>[\w.]+)\))?(: (?P<text>.*))?$"
)
# Exceptions that only carry another one: the cause is further up or inside them.
WRAPPERS = re.compile(
    r"(^ray\.|RayTaskError|RayActorError|TrainingFailedError|WorkerGroupError|ControllerError|"
    r"RuntimeEnvSetupError|ChildProcessError|JobFailed)"
)
REASON_LIMIT = 300
KEPT_LOG_BYTES = 8 * 1024 * 1024  # an ended attempt's driver log is kept in the bucket up to its last this many
LOG_READ_BYTES = 1 << 16  # a log whose tail alone is kept is read in pieces this size (tail)


def tail(chunks: Iterable[bytes], limit: int) -> bytes:
    """The last `limit` bytes at most of a log read in chunks, starting at a line's start where it was cut (a
    token cut in two would leave a fragment no redaction could recognise): never more than about twice `limit` in
    memory, however long the log."""
    kept = bytearray()
    cut = False
    for chunk in chunks:
        kept += chunk
        if len(kept) > 2 * limit:
            del kept[: len(kept) - limit]
            cut = True
    if len(kept) > limit:
        del kept[: len(kept) - limit]
        cut = True
    if cut:
        start = kept.find(b"\n")
        del kept[: start + 1 if start >= 0 else len(kept)]  # no line's start in it: nothing is whole
    return bytes(kept)


def strip_ansi(text: str) -> str:
    """Text without terminal colour and cursor codes (Ray colours its driver log)."""
    return ANSI.sub("", text)


# Ray's decorations at a line's end: its log deduplication's count ("[repeated 2x across cluster]").
RAY_SUFFIX = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# An object's repr with its address (`<_io.BytesIO object at 0x7f...>`): its type says what it is, the address nothing.
OBJECT_AT = re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>")
MODULE_PATH = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*(?:\(|$))")  # `a.b.Error` or `a.b.Error(Inner)`


def clean(line: str) -> str:
    return RAY_SUFFIX.sub("", RAY_PREFIX.sub("", strip_ansi(line))).strip()


def readable(line: str) -> str:
    """An exception line for people: its type without the module path (`trainer.preflight.PreflightError` ->
    `PreflightError`), objects without their addresses."""
    kind, sep, text = line.partition(":")
    if EXCEPTION_LINE.match(line):
        kind = MODULE_PATH.sub("", kind)
    return OBJECT_AT.sub(r"<\1>", kind + sep + text)


def progress(text: str) -> Iterator[Progress | Phase]:
    """The trainer's progress and phase lines, in the order it printed them."""
    for line in text.splitlines():
        for marker, model in ((PROGRESS_MARKER, Progress), (PHASE_MARKER, Phase)):
            at = line.find(marker)
            if at < 0:
                continue
            try:
                yield model.model_validate(json.loads(line[at + len(marker) :]))
            except (ValueError, ValidationError):
                continue  # a line cut by the log's end


# Exceptions of side threads that say nothing about why the job failed (Ray Train's placement-group cleaner
# meeting another local cluster on the machine).
NOISE = re.compile(r"Found multiple active Ray instances")


def root_cause(text: str) -> str | None:
    """The last exception line of the innermost error, e.g. `FileNotFoundError: /data/x.parquet`."""
    found: list[str] = []
    for raw in text.splitlines():
        line = clean(raw)
        match = EXCEPTION_LINE.match(line)
        if match and not line.startswith(("During handling", "The above exception")) and not NOISE.search(line):
            found.append(line)
    if not found:
        return None
    causes = [line for line in found if not WRAPPERS.search(line.split(":", 1)[0])]
    return readable((causes or found)[-1])[:REASON_LIMIT]


# Root causes worth a second try for a nightly (the service answered later): network and server-side errors, not
# the preflight's verdicts (a missing or gated model, bad data, a Hub unreachable from where the run starts).
TRANSIENT_CAUSE = re.compile(
    r"^(?!.*Preflight)(?:[\w.]*\.)?(ConnectionError|ConnectionResetError|ReadTimeout|ConnectTimeout|TimeoutError|"
    r"ServiceUnavailable|TooManyRequests|InternalServerError|BrokenPipeError)\b|HTTP (?:429|5\d\d)\b|"
    r"\b(?:502|503|504) (?:Bad Gateway|Service Unavailable|Gateway Time-?out)"
)


def transient_cause(reason: str | None) -> bool:
    """Whether a failed job's reason names a cause that may pass by itself (functions/core/decide.py retries a
    nightly once more for it)."""
    return bool(reason and TRANSIENT_CAUSE.search(reason))


# Ray Train's failure policy deciding about a failed worker group (ray/train/v2/_internal/execution/
# failure_handling/default.py, _log_decision): RETRY restarts the group from the last checkpoint in the same job.
FAILURE_DECISION = re.compile(
    r"\[FailurePolicy\] (?P<decision>RETRY|RAISE)\n\s*Source: (?P<source>[^\n]+)\n"
    r"\s*Error count: (?P<count>\d+) \(max allowed: (?P<limit>[^)]+)\)\n(?P<error>(?:(?!\[FailurePolicy\]).*\n?){1,40})"
)


def failed_attempts(text: str) -> Iterator[str]:
    """One line per failure Ray Train decided on in the driver log: 'worker group failure 1 of 3 (at most 2
    restarts): <root cause>; restarting from the last checkpoint' (or '...: giving up')."""
    cleaned = "\n".join(clean(line) for line in text.splitlines())
    for match in FAILURE_DECISION.finditer(cleaned):
        limit = match["limit"]
        cause = root_cause(match["error"]) or match["error"].strip().splitlines()[0][:REASON_LIMIT]
        then = "restarting from the last checkpoint" if match["decision"] == "RETRY" else "giving up"
        restarts = "no restart" if limit == "0" else f"at most {limit} restarts"
        yield f"{match['source']} failure {match['count']} ({restarts}): {cause}; {then}"
