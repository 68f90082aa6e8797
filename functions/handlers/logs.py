"""Structured logs for Cloud Logging (one JSON object per line) with secrets scrubbed from every record."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from functions.core.secrets import redact, redact_json


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"severity": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key in ("run_id", "state", "ignored"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        return json.dumps(redact_json(entry))  # each string redacted: the line stays one valid JSON object


_lock = threading.Lock()
_configured = False
_plain = logging.Formatter()


def _scrubbing_factory(make: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """Every log record is scrubbed as it is made, so every handler (functions-framework's execution-id
    handler included) and every traceback sees only the redacted text."""

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            record.msg, record.args = redact(record.getMessage()), ()
        except Exception:
            record.msg = redact(str(record.msg))
        if record.exc_info:
            record.exc_text = redact(_plain.formatException(record.exc_info))
        return record

    return factory


class StdoutHandler(logging.StreamHandler):
    """Writes to the process's own standard output (file descriptor 1, what Cloud Logging collects), whatever
    sys.stdout was when it was set up: a stream swapped in for a while (a test's capture of one command's
    output) neither receives the log lines nor, once gone, swallows them."""

    @property
    def stream(self) -> Any:
        return sys.__stdout__

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always the process's own


def setup(level: int = logging.INFO) -> None:
    global _configured
    with _lock:
        if _configured:
            return
        logging.setLogRecordFactory(_scrubbing_factory(logging.getLogRecordFactory()))
        # A handler that fails must not print the raw record and traceback to stderr (unscrubbed) instead.
        logging.raiseExceptions = False
        handler = StdoutHandler()
        handler.setFormatter(JsonFormatter())
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(level)
        _configured = True
