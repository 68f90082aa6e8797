"""The capacity kinds' table (functions/core/capacity.py): every reader takes a kind's row, so the table is the
one place a kind is described. Tested as a table, KubeRay's way."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from functions.core import capacity
from functions.core.capacity import KINDS, CapacityKind
from functions.core.config import CapacityOption, ScalingSpec

pytestmark = pytest.mark.unit


def test_every_kind_the_config_takes_has_one_row_named_as_its_key():
    assert tuple(KINDS) == get_args(CapacityKind)
    assert all(row.name == name for name, row in KINDS.items())
    assert set(capacity.TOLD_IN_ORDER) | {"on-demand"} == set(KINDS), "every kind is told from its node's labels"


@pytest.mark.parametrize(
    ("labels", "told"),
    [
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"cloud.google.com/gke-flex-start": "true"}, "flex-start"),
        ({"cloud.google.com/gke-provisioning": "flex-start"}, "flex-start"),
        ({"cloud.google.com/reservation-name": "a4-res"}, "reservation a4-res"),
        ({"cloud.google.com/gke-spot": "false"}, "on-demand"),
        ({}, "on-demand"),
    ],
)
def test_a_nodes_capacity_is_told_by_the_labels_gke_puts_on_it(labels, told):
    assert capacity.node_capacity(labels) == told


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"kind": "reservation"}, "a reservation option needs its name"),
        ({"kind": "spot", "name": "r"}, "name, project and block are a reservation's; a spot option has none"),
        ({"kind": "on-demand", "max_run_seconds": 3600}, "max_run_seconds is flex-start's"),
    ],
)
def test_an_option_says_only_what_its_kind_has(option, said):
    with pytest.raises(ValidationError, match=said):
        CapacityOption.model_validate(option)


def test_each_kinds_row_decides_its_priority_taint_and_checkpoint_cadence():
    spot_first = ScalingSpec.model_validate(
        {"capacity": [{"kind": "spot"}, {"kind": "flex-start"}, {"kind": "on-demand"}]}
    )
    assert spot_first.on_spot, "Spot is preemptible: checkpoints on Young's interval"
    assert not ScalingSpec.model_validate({"capacity": [{"kind": "flex-start"}]}).on_spot
    assert KINDS["spot"].priority(None) == {"spot": True}
    flex = CapacityOption.model_validate({"kind": "flex-start"})
    assert KINDS["flex-start"].priority(flex) == {"flexStart": {"enabled": True}, "maxRunDurationSeconds": 604800}
    assert [k for k, row in KINDS.items() if row.taint] == ["spot"]


def test_terraform_allows_the_kinds_the_table_has():
    """Terraform's policy_capacity_kinds validation names the same kinds as the table."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "terraform" / "policy.tf").read_text()
    listed = re.search(r"policy_capacity_kinds : contains\(\[([^\]]*)\], kind\)", text)
    assert listed is not None
    assert [k.strip().strip('"') for k in listed.group(1).split(",")] == list(KINDS)
