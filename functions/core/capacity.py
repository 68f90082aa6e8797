"""The kinds of GPU capacity a run's nodes may come from, one row each (GKE's accelerator consumption options):
what a config's option of that kind may say, its ComputeClass priority, the labels GKE puts on its nodes, the
taint Autopilot gives them, and whether they can be taken away at short notice (the trainer then checkpoints on
Young's interval, trainer/checkpoints.py). Every reader takes its kind's row; adding a kind is a row here and the
checklist in docs/architecture.md.

Sources: https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes (priorities:
reservations, flexStart and maxRunDurationSeconds, spot), https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms
(the gke-spot label and Autopilot's taint), https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start-vms
(the flex-start label, at most seven days).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

CapacityKind = Literal["reservation", "flex-start", "spot", "on-demand"]
FLEX_START_MAX_SECONDS = 7 * 86400  # flex-start VMs run at most seven days
RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"


def _reservation(option: Any) -> dict[str, Any]:
    specific: dict[str, Any] = {"name": option.name}
    if option.project:
        specific["project"] = option.project
    if option.block:
        specific["reservationBlock"] = {"name": option.block}
    return {"reservations": {"affinity": "Specific", "specific": [specific]}}


def _flex_start(option: Any) -> dict[str, Any]:
    return {"flexStart": {"enabled": True}, "maxRunDurationSeconds": option.max_run_seconds or FLEX_START_MAX_SECONDS}


@dataclass(frozen=True)
class Kind:
    name: CapacityKind
    priority: Callable[[Any], dict[str, Any]]  # what its ComputeClass priority adds to the node's shape
    fields: tuple[str, ...] = ()  # the option fields only this kind has
    required: tuple[str, ...] = ()  # of those, the ones it needs
    node_labels: tuple[dict[str, str], ...] = ()  # GKE's labels on its nodes (any one of them tells the kind)
    taint: dict[str, str] | None = None  # Autopilot's taint on its nodes, which a worker pod must tolerate
    preemptible: bool = False  # nodes taken away at short notice: checkpoints on Young's interval
    owner: str = field(default="", compare=False)  # how an error names it ("a reservation's")

    def tells(self, labels: dict[str, str]) -> str | None:
        """This kind's name for a node with these labels (None: not this kind's node)."""
        if self.name == "reservation":
            return f"reservation {labels[RESERVATION_NAME_LABEL]}" if labels.get(RESERVATION_NAME_LABEL) else None
        return self.name if any(all(labels.get(k) == v for k, v in sign.items()) for sign in self.node_labels) else None


KINDS: dict[str, Kind] = {
    "reservation": Kind(
        "reservation", _reservation, fields=("name", "project", "block"), required=("name",), owner="a reservation's"
    ),
    "flex-start": Kind(
        "flex-start",
        _flex_start,
        fields=("max_run_seconds",),
        node_labels=({"cloud.google.com/gke-flex-start": "true"}, {"cloud.google.com/gke-provisioning": "flex-start"}),
        owner="flex-start's",
    ),
    "spot": Kind(
        "spot",
        lambda option: {"spot": True},
        node_labels=({"cloud.google.com/gke-spot": "true"},),
        taint={"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        preemptible=True,
    ),
    "on-demand": Kind("on-demand", lambda option: {}),
}

# How a node's capacity is read from its labels: the first kind that tells it, else on-demand.
TOLD_IN_ORDER = ("spot", "flex-start", "reservation")


def node_capacity(labels: dict[str, str]) -> str:
    """Which capacity a GKE node came from, by the labels GKE puts on it: `spot`, `flex-start`,
    `reservation <name>` or `on-demand`."""
    return next((told for name in TOLD_IN_ORDER if (told := KINDS[name].tells(labels))), "on-demand")


def option_problems(option: Any) -> list[str]:
    """What an option says that its kind does not have, or lacks that it needs."""
    kind = KINDS[option.kind]
    found = [f"a {kind.name} option needs its {f}" for f in kind.required if getattr(option, f) is None]
    for other in KINDS.values():
        if not any(f not in kind.fields and getattr(option, f) is not None for f in other.fields):
            continue
        if len(other.fields) == 1:
            found.append(f"{other.fields[0]} is {other.owner}")
        else:
            listed = ", ".join(other.fields[:-1]) + f" and {other.fields[-1]}"
            found.append(f"{listed} are {other.owner}; a {kind.name} option has none")
    return found
