"""Structured logs for Cloud Logging (one JSON object per line) with secrets scrubbed from every record."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading

# Hugging Face user access tokens; the configured token value is scrubbed as well.
HF_TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{20,}")
REDACTED = "[REDACTED]"
_secrets: set[str] = set()
_lock = threading.Lock()


def add_secret(value: str | None) -> None:
    if value:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    for secret in _secrets:
        text = text.replace(secret, REDACTED)
    return HF_TOKEN_PATTERN.sub(REDACTED, text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"severity": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key in ("run_id", "state"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        return redact(json.dumps(entry))


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
