"""Whether an IAM allow policy grants a principal a permission on a resource, evaluated here: for the principals
Policy Troubleshooter does not evaluate (its AccessTuple.principal takes Google accounts and service accounts, not
a Workload Identity `principal://` identifier, https://cloud.google.com/policy-intelligence/docs/reference/
policytroubleshooter/rest/v3/AccessTuple). The policies are the resource's and its project's (getIamPolicy, version
3, so conditional bindings come whole), the roles' permissions what IAM's roles.get answers.

Members (https://cloud.google.com/iam/docs/principal-identifiers): the principal itself, and the principal sets a
GKE Workload Identity principal belongs to (its namespace, the whole pool). Conditions: the CEL terms IAM Conditions
offer on resource names and types (`resource.name == "..."`, `resource.name.startsWith("...")`,
`resource.type == "..."`), joined by `||` and `&&`; anything else is not guessed at: unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

GRANTED, NOT_GRANTED, UNKNOWN = "granted", "not granted", "unknown"
_WORKLOAD = re.compile(
    r"^principal://iam\.googleapis\.com/(?P<pool>projects/\d+/locations/global/workloadIdentityPools/[^/]+)"
    r"/subject/ns/(?P<ns>[^/]+)/sa/[^/]+$"
)
_TERM = re.compile(
    r'^resource\.(?:name == "(?P<equal>[^"\\]*)"|name\.startsWith\("(?P<prefix>[^"\\]*)"\)'
    r'|type == "(?P<type>[^"\\]*)")$'
)


def memberships(principal: str) -> set[str]:
    """The member strings that name this principal in a policy: itself, and for a GKE Workload Identity principal the
    principal sets of its namespace and of its pool."""
    found = {principal}
    if hit := _WORKLOAD.match(principal):
        pool = f"principalSet://iam.googleapis.com/{hit['pool']}"
        found |= {f"{pool}/namespace/{hit['ns']}", f"{pool}/*"}
    return found


def condition_holds(expression: str, name: str, kind: str) -> bool | None:
    """The CEL expression on this resource (name and type); None where it is not one of the forms understood."""
    verdicts = []
    for alternative in expression.split("||"):
        terms = []
        for term in alternative.split("&&"):
            term = term.strip()
            while (hit := _TERM.match(term)) is None and term.startswith("(") and term.endswith(")"):
                term = term[1:-1].strip()  # a term in parentheses of its own
            if hit is None:
                return None
            if hit["equal"] is not None:
                terms.append(name == hit["equal"])
            elif hit["prefix"] is not None:
                terms.append(name.startswith(hit["prefix"]))
            else:
                terms.append(kind == hit["type"])
        verdicts.append(all(terms))
    return any(verdicts)


def roles_granting(policies: Iterable[Any], principal: str) -> list[tuple[str, Any]]:
    """(role, its binding's condition or None) of every binding in these policies that names the principal. A
    policy or binding of another shape is left out (the caller says unknown where it matters)."""
    members = memberships(principal)
    found = []
    for policy in policies:
        bindings = policy.get("bindings") if isinstance(policy, dict) else None
        for binding in bindings if isinstance(bindings, list) else []:
            if not isinstance(binding, dict) or not isinstance(binding.get("role"), str):
                continue
            if members & {m for m in binding.get("members") or [] if isinstance(m, str)}:
                found.append((binding["role"], binding.get("condition")))
    return found


def verdict(
    bindings: list[tuple[str, Any]],
    role_permissions: Mapping[str, frozenset[str] | None],
    permission: str,
    name: str,
    kind: str,
) -> tuple[str, str]:
    """(GRANTED, NOT_GRANTED or UNKNOWN, which binding or why) for the principal's bindings (roles_granting)."""
    doubts = []
    for role, condition in bindings:
        permissions = role_permissions.get(role)
        if permissions is None:
            doubts.append(f"the permissions of {role} could not be read")
            continue
        if permission not in permissions:
            continue
        if condition is None:
            return GRANTED, role
        expression = condition.get("expression") if isinstance(condition, dict) else None
        holds = condition_holds(expression, name, kind) if isinstance(expression, str) else None
        if holds:
            return GRANTED, f"{role} (condition {condition.get('title') or expression})"
        if holds is None:
            doubts.append(f"{role}'s condition is not one evaluated here: {str(expression)[:120]}")
    if doubts:
        return UNKNOWN, "; ".join(doubts)
    return NOT_GRANTED, "no binding of the resource's or the project's policy grants it"
