"""CloudEvents in, requests out: storage finalize and Pub/Sub envelopes parsed into what the handlers act on.

Deliveries are at least once, so every request carries the deterministic run id of its event.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from functions.core import jsonsafe, runids
from functions.core.config import BUCKET
from functions.core.config_file import MAX_CONFIG_BYTES, YAML_SUFFIXES, ConfigFormat, config_format
from functions.core.policy import CANCEL_DIGEST_ATTRIBUTE, digest_problem

STORAGE_FINALIZED = "google.cloud.storage.object.v1.finalized"
PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
CONFIG_PREFIX = "configs/"
CONFIG_SUFFIXES = (".json", *YAML_SUFFIXES)


@dataclass(frozen=True)
class LaunchRequest:
    run_id: str
    source: dict[str, str]
    event_time: dt.datetime | None
    config: dict[str, Any] | None = None  # inline config from a message
    config_uri: str | None = None  # gs:// URI to read it from
    config_format: ConfigFormat = "json"  # how the config at config_uri is written
    errors: list[str] = field(default_factory=list)  # why it cannot be launched, known from the event alone
    attributes: dict[str, str] = field(default_factory=dict)  # the Pub/Sub message's attributes
    message_run_id: str | None = None  # a nightly request's own id, used when it may not take the nightly slot


@dataclass(frozen=True)
class WatchRequest:
    kind: str  # tick | finished | cancel | retry
    run_id: str | None = None
    token: str | None = None  # cancel, retry: the submitter's cancel token (functions/core/policy.py)
    attributes: dict[str, str] = field(default_factory=dict)


class Ignored(Exception):
    """An event that is not ours to act on (another object in the bucket, an unknown type)."""


class Malformed(Ignored):
    """An envelope the platform would not send (a body that is not a JSON object, a storage event without a string
    bucket, name and generation, a Pub/Sub envelope without a message id): no run id can be derived, so the launch
    keeps a copy for a person and logs why, instead of dropping it without a trace."""


# A bucket name as GCS allows it, an object name, and optionally a numeric generation.
GS_URI = re.compile(
    rf"^gs://(?P<bucket>{BUCKET})/(?P<name>[^#\x00-\x1f\x7f]{{1,1024}})"
    r"(#(?P<generation>[0-9]{1,20}))?$"
)


def _time(value: Any) -> dt.datetime | None:
    """A timestamp, UTC when it names no zone; None when absent or not a timestamp (no age is checked)."""
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str) and value:
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _data(event: Any) -> dict[str, Any]:
    data = event.get_data() if hasattr(event, "get_data") else event["data"]
    if isinstance(data, (bytes, str)):
        try:
            data = jsonsafe.loads(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise Malformed(f"event data is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise Malformed("event data is not an object")
    return data


def config_uri_error(uri: Any) -> str | None:
    """Why `uri` cannot name a config, or None."""
    if not isinstance(uri, str) or not GS_URI.match(uri):
        return f"'config_uri' must be gs://BUCKET/OBJECT with an optional numeric #generation, not {str(uri)[:200]!r}"
    return None


def _attribute(event: Any, name: str) -> Any:
    return event[name] if hasattr(event, "get_attributes") and name in event.get_attributes() else None


def _message(event: Any) -> tuple[dict[str, Any], dict[str, Any] | None, list[str]]:
    """The Pub/Sub message and its JSON body (None with errors when the body is not a JSON object)."""
    message = _data(event).get("message") or {}
    if (
        not isinstance(message, dict)
        or not isinstance(message.get("messageId"), (str, int))
        or not str(message["messageId"])
    ):
        raise Malformed("Pub/Sub envelope without messageId")
    data = message.get("data") or ""
    if not isinstance(data, str):
        return message, None, [f"message data is a JSON {type(data).__name__}, not base64 text"]
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return message, None, ["message data is not base64"]
    if len(raw) > MAX_CONFIG_BYTES:
        return message, None, [f"message is {len(raw)} bytes; the limit is {MAX_CONFIG_BYTES}"]
    try:
        body = jsonsafe.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as err:
        return message, None, [f"message data is not JSON: {err}"]
    if not isinstance(body, dict):
        return message, None, ["message data must be a JSON object"]
    return message, body, []


def launch_request(event: Any) -> LaunchRequest:
    kind = _attribute(event, "type")
    if kind == STORAGE_FINALIZED:
        return _from_upload(event)
    if kind == PUBSUB_PUBLISHED:
        return _from_message(event)
    raise Ignored(f"event type {kind!r}")


def _from_upload(event: Any) -> LaunchRequest:
    data = _data(event)
    bucket, name, generation = data.get("bucket"), data.get("name"), data.get("generation")
    if not (
        isinstance(bucket, str)
        and isinstance(name, str)
        and isinstance(generation, (str, int))
        and bucket
        and name
        and str(generation)
    ):
        raise Malformed("storage event without a string bucket, name and generation")
    if not name.startswith(CONFIG_PREFIX) or not name.lower().endswith(CONFIG_SUFFIXES):
        raise Ignored(f"gs://{bucket[:100]}/{name[:200]} is not a run config (configs/*.json, *.yaml)")
    generation = str(generation)[:40]
    uri = f"gs://{bucket}/{name}"
    errors = []
    size = str(data.get("size") or 0)  # int64 fields arrive as strings
    if not size.isdigit():
        errors.append(f"object size {size[:40]!r} is not a number")
    elif int(size[:40]) > MAX_CONFIG_BYTES:
        errors.append(f"config is {size[:40]} bytes; the limit is {MAX_CONFIG_BYTES}")
    if not generation.isdigit():
        errors.append(f"object generation {generation!r} is not a number")
    elif why := config_uri_error(f"{uri}#{generation}"):
        errors.append(why)
    metadata = data.get("metadata")
    digest = metadata.get(CANCEL_DIGEST_ATTRIBUTE) if isinstance(metadata, dict) else None
    if why := digest_problem(digest):
        errors.append(f"object metadata {why}")
    return LaunchRequest(
        run_id=runids.for_object(bucket, name, generation),
        source=_with_digest({"kind": "upload", "ref": f"{uri}#{generation}"}, digest),
        event_time=_time(_attribute(event, "time") or data.get("timeCreated")),
        config_uri=None if errors else f"{uri}#{generation}",
        config_format=config_format(name),
        errors=errors,
    )


def _from_message(event: Any) -> LaunchRequest:
    message, body, errors = _message(event)
    message_id = str(message["messageId"])
    published = _time(message.get("publishTime") or _attribute(event, "time"))
    body = body or {}
    run_name = body.get("run_name") if isinstance(body.get("run_name"), str) else None
    if run_name is not None and not runids.is_valid_name(run_name):
        errors.append(f"run_name: {run_name!r} is not a DNS label of at most 25 characters")
        run_name = None
    nightly = body.get("nightly") is True
    message_run_id = runids.for_message(message_id, run_name)
    config, uri = body.get("config"), body.get("config_uri")
    line = run_name or _config_name(config, uri)  # a nightly line: its run is <line>-<date>, one a day per line
    run_id = runids.for_nightly(published.date(), line) if nightly and published else message_run_id
    if not errors and (config is None) == (uri is None):
        errors.append("the message needs exactly one of 'config' (an object) or 'config_uri' (gs://...)")
    elif config is not None and not isinstance(config, dict):
        errors.append("'config' must be a JSON object")
    elif uri is not None and (why := config_uri_error(uri)):
        errors.append(why)
    if why := digest_problem(_attributes(message).get(CANCEL_DIGEST_ATTRIBUTE)):
        errors.append(f"message attribute {why}")
    return LaunchRequest(
        run_id=run_id,
        source=_with_digest(
            {"kind": "nightly" if nightly else "message", "ref": f"pubsub:{message_id}"},
            _attributes(message).get(CANCEL_DIGEST_ATTRIBUTE),
        ),
        event_time=published,
        config=None if errors else config,
        config_uri=None if errors else uri,
        config_format=config_format(uri) if isinstance(uri, str) else "json",
        errors=errors,
        attributes=_attributes(message),
        message_run_id=message_run_id,
    )


def _config_name(config: Any, uri: Any) -> str:
    """What a nightly message without run_name names its run after: its config's file (gs://b/library/shop.yaml:
    "shop"), or an inline config's name; "nightly" when neither says."""
    if isinstance(uri, str) and (stem := uri.split("#", 1)[0].rsplit("/", 1)[-1].split(".", 1)[0]):
        return stem
    if isinstance(config, dict) and isinstance(config.get("name"), str) and config["name"]:
        return str(config["name"])
    return "nightly"


def _with_digest(source: dict[str, str], digest: Any) -> dict[str, str]:
    """The source, with the submitter's cancel digest when it sent a well-formed one (a malformed one is an
    error of the request: digest_problem)."""
    return {**source, "cancel_digest": digest} if digest_problem(digest) is None and digest else source


def _attributes(message: dict[str, Any]) -> dict[str, str]:
    attributes = message.get("attributes")
    if not isinstance(attributes, dict):
        return {}
    return {str(k)[:256]: v[:1024] for k, v in list(attributes.items())[:100] if isinstance(v, str)}


def watch_request(event: Any) -> WatchRequest:
    if _attribute(event, "type") != PUBSUB_PUBLISHED:
        raise Ignored(f"event type {_attribute(event, 'type')!r}")
    message, body, errors = _message(event)
    if errors or body is None:
        raise Ignored("; ".join(errors))
    kind = body.get("kind", "tick")
    run_id = body.get("run_id")
    if kind not in ("tick", "finished", "cancel", "retry"):
        raise Ignored(f"unknown watch message kind {kind!r}")
    if kind != "tick" and not (isinstance(run_id, str) and runids.is_valid_id(run_id)):
        raise Ignored(f"{kind} message without a valid run_id")
    token = body.get("token") if isinstance(body.get("token"), str) else None
    return WatchRequest(kind=kind, run_id=run_id, token=token and token[:256], attributes=_attributes(message))
