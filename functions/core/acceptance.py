"""Whether a launch request's run is accepted, judged in one pure function, as the watch's steps are decided in
one (functions/core/decide.py): `judge(request, document, rules, now) -> Verdict`.

The launch handler reads, judges, writes (functions/handlers/launch.py receive): it reads the stored record and
the request's config (`Document`), and writes the verdict as a RECEIVED or REJECTED record. Everything between is
here: the request's own errors, its age, the nightly key, the bucket and the runs-bucket prefix a config_uri may
name (all before anything is read: `before_reading`), then the config's schema, the operator's policy (fixed
fields first, then every rule), the estimate and the budget; and the right-sizing advice an accepted run carries.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Protocol

from functions.core import advice, events
from functions.core.config import ConfigError, RunConfig
from functions.core.config_file import parse_config
from functions.core.estimate import Estimate, estimate, over_budget
from functions.core.policy import Policy


class Rules(Protocol):
    """What the deployment decides about a request (the handlers' Settings has it all)."""

    @property
    def max_event_age_s(self) -> int: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def default_storage(self) -> str: ...

    @property
    def own_buckets(self) -> tuple[str, ...]: ...

    @property
    def prices(self) -> dict[str, float]: ...

    def violations(self, cfg: RunConfig) -> list[str]: ...

    def config_uri_violation(self, uri: str) -> str | None: ...


@dataclasses.dataclass(frozen=True)
class Document:
    """The request's config as the handler read it: its bytes (or the message's own dict), or why it could not be
    read (absent, too large, refused)."""

    raw: bytes | dict[str, Any] | None = None
    unreadable: str | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    errors: list[str]
    config: RunConfig | None = None  # the config as the run takes it: policy-fixed, storage resolved
    estimate: Estimate | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)  # right-sizing advice for an accepted run

    @property
    def accepted(self) -> bool:
        return not self.errors


def nightly_refusal(request: events.LaunchRequest, rules: Rules) -> str | None:
    """A nightly request without the scheduler's key: refused, and under its own id (whoever publishes without
    the key cannot take the day's nightly slot)."""
    return rules.policy.nightly_violation(request.attributes) if request.source["kind"] == "nightly" else None


def before_reading(request: events.LaunchRequest, rules: Rules, now: dt.datetime) -> list[str]:
    """What refuses a request before its config is read: its own errors, its age, the nightly key, the bucket and
    the runs-bucket prefix its config_uri names (uploads come from the bucket the trigger watches; a message may
    name any URI)."""
    errors = list(request.errors)
    if request.event_time and (age := (now - request.event_time).total_seconds()) > rules.max_event_age_s:
        errors.append(f"event is {int(age)}s old; older than RAYTUNE_MAX_EVENT_AGE_S={rules.max_event_age_s}")
    if refused := nightly_refusal(request, rules):
        errors.append(refused)
    uri = request.config_uri or ""
    named = request.source["kind"] != "upload" and uri
    why = named and (
        rules.policy.bucket_violation(uri, "config_uri", rules.own_buckets) or rules.config_uri_violation(uri)
    )
    if why:
        errors.append(why)
    return errors


def judge(request: events.LaunchRequest, document: Document | None, rules: Rules, now: dt.datetime) -> Verdict:
    """The run's verdict: every reason to refuse it, or its config with its estimate and advice. `document` is
    None where the request was refused before its config was read."""
    errors = before_reading(request, rules, now)
    if errors or document is None:
        return Verdict(errors or ["the request's config was not read"])
    if document.unreadable or document.raw is None:
        return Verdict([document.unreadable or "the request's config is empty"])
    try:
        cfg = rules.policy.fixed(parse_config(document.raw, request.config_format).with_storage(rules.default_storage))
    except ConfigError as err:
        return Verdict(list(err.errors))
    errors = rules.violations(cfg)
    expected = estimate(cfg, rules.prices)
    if why := over_budget(cfg, expected):
        errors.append(why)
    if errors:
        return Verdict(errors, cfg, expected)
    return Verdict([], cfg, expected, advice.right_sizing(cfg))
