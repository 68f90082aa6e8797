"""Secret scrubbing: the configured Hugging Face token and anything shaped like one are replaced in
every text that leaves the controller (logs, reasons, rejected configs)."""

from __future__ import annotations

import re
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
