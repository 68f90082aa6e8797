"""Where a run may get its GPUs: its regions in order (cluster.region, then cluster.fallback_regions), each with the
capacity options offered there, and when a run waiting for capacity moves on (docs/regions.md).

GKE places the nodes inside a region (the ComputeClass's priorities) and KubeRay the Ray pods; the controller's
own part is choosing the region and moving a run that waited too long in one: every such decision is made in
functions/core/decide.py with the rules here.
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel

from functions.core.config import RunConfig

# How long a submitted run waits for capacity in one region before it moves on, where neither its config
# (deadlines.region_seconds) nor the operator (policy region_seconds, Terraform's policy_region_seconds) says.
DEFAULT_REGION_SECONDS = 1800


class Placement(BaseModel):
    """One region a run was placed in: from when, until when, and why it left. A run that never moved has none
    written (its region is its config's cluster.region)."""

    region: str
    attempt: int  # the attempt that was placed there
    since: dt.datetime  # placed there: submitted, or moved in
    until: dt.datetime | None = None  # left it
    why: str | None = None  # why it left: how long it waited and what GKE said


def placed(cfg: RunConfig, region: str) -> RunConfig:
    """The config as applied in `region`: its cluster there, and only the capacity options offered there (the
    region's ComputeClass)."""
    if region == cfg.cluster.region and not cfg.cluster.fallback_regions:
        return cfg
    capacity = cfg.scaling.capacity
    # Placed, it has one region: where it moves next is the accepted config's to say (next_region).
    update: dict[str, object] = {"cluster": cfg.cluster.model_copy(update={"region": region, "fallback_regions": []})}
    if capacity is not None:
        here = [o for o in capacity if o.region in (None, region)]
        update["scaling"] = cfg.scaling.model_copy(update={"capacity": here})
    return cfg.model_copy(update=update)


def next_region(cfg: RunConfig, here: str, tried: set[str]) -> str | None:
    """Where a run waiting in `here` goes next (`cfg`: its accepted config): the next of its regions in order,
    coming round to the first, that this attempt has not tried (an attempt after lost nodes may go back to a region
    an earlier one left); None when it has tried them all."""
    regions = cfg.cluster.regions
    index = regions.index(here) if here in regions else -1
    return next((r for r in (*regions[index + 1 :], *regions[: index + 1]) if r != here and r not in tried), None)


def moved_on(
    placements: list[Placement], here: str, since: dt.datetime, attempt: int, to: str, now: dt.datetime, why: str
) -> list[Placement]:
    """The placements after a run left `here` (where it was since `since`) for `to`."""
    left = placements[-1] if placements else Placement(region=here, attempt=attempt, since=since)
    return [
        *placements[:-1],
        left.model_copy(update={"until": now, "why": why}),
        Placement(region=to, attempt=attempt, since=now),
    ]


def wait_bound(cfg: RunConfig, default_s: int, pending_s: int) -> int:
    """How long a submitted run waits for its nodes in one region before it moves on: its deadlines.region_seconds
    or the operator's default, never past its pending deadline (in its last region the pending deadline ends it)."""
    return min(cfg.deadlines.region_seconds or default_s, pending_s)
