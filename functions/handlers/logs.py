"""Structured logs for Cloud Logging (one JSON object per line) with secrets scrubbed from every record."""

from __future__ import annotations

import json
import logging
import sys
import threading

from functions.core.secrets import redact


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"severity": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key in ("run_id", "state"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        return redact(json.dumps(entry))


_lock = threading.Lock()
_configured = False


def setup(level: int = logging.INFO) -> None:
    global _configured
    with _lock:
        if _configured:
            return
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(JsonFormatter())
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(level)
        _configured = True
