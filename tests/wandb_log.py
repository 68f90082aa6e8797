"""W&B's offline run file (`run-<id>.wandb`) read back as W&B writes it: its own protobuf records
(`wandb.proto.wandb_internal_pb2.Record`) in the LevelDB log framing W&B's transaction log uses (a 7-byte file
header ":W&B", magic 0xBEE1, version 0; 32 KiB blocks; each chunk a CRC-32, a length and a FULL/FIRST/MIDDLE/LAST
type). wandb 0.31 keeps its own reader in Go (wandb-core), so the framing is read here; the records are W&B's."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7  # ":W&B" + magic + version
CHUNK = 7  # crc32 (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1, "not a W&B run file"
    found, pending, at = [], b"", HEADER
    while at + CHUNK <= len(data):
        left = BLOCK - at % BLOCK
        if left < CHUNK:  # a block's tail too short for a chunk header is padding
            at += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[at : at + CHUNK])
        if kind == 0 and length == 0:
            at += left  # zero padding to the block's end
            continue
        payload = data[at + CHUNK : at + CHUNK + length]
        at += CHUNK + length
        pending = payload if kind in (FULL, FIRST) else pending + payload
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            found.append(record)
    return found


def history(path: Path) -> list[dict[str, Any]]:
    """Each logged row: its keys and values as W&B keeps them (JSON)."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def summary(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for record in records(path):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                values[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return values


def config(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for record in records(path):
        if record.WhichOneof("record_type") in ("config", "run"):
            items = record.config.update if record.WhichOneof("record_type") == "config" else record.run.config.update
            for item in items:
                values[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return values
