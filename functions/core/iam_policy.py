"""Whether an IAM allow policy grants a principal a permission on a resource, evaluated here: for the principals
Policy Troubleshooter does not evaluate (its AccessTuple.principal takes Google accounts and service accounts, not
a Workload Identity `principal://` identifier, https://cloud.google.com/policy-intelligence/docs/reference/
policytroubleshooter/rest/v3/AccessTuple). The policies are the resource's and its project's (getIamPolicy, version
3, so conditional bindings come whole), the roles' permissions what IAM's roles.get answers.

Members (https://cloud.google.com/iam/docs/principal-identifiers, and Workload Identity Federation for GKE's
table of principal identifiers): the principal itself, and the principal sets a GKE Workload Identity principal
belongs to: its namespace (`.../namespace/NS`), the whole pool (`.../*`), the clusters it runs in
(`.../kubernetes.cluster/https://container.googleapis.com/v1/projects/P/locations/L/clusters/C`, known from the
deployment). A set this evaluation cannot place the principal in or out of (a Kubernetes service account's or
a pod's UID, `kubernetes.serviceaccount.uid/...`, an attribute set, `attribute.NAME/VALUE`, of the same pool)
makes a grant through it unknown, never "not granted". Conditions: the CEL terms IAM Conditions
offer on resource names and types (`resource.name == "..."`, `resource.name.startsWith("...")`,
`resource.type == "..."`), joined by `||` and `&&`; anything else is not guessed at: unknown.
"""

from __future__ import annotations

import fnmatch
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


def memberships(principal: str, clusters: Iterable[str] = ()) -> set[str]:
    """The member strings that name this principal in a policy: itself, and for a GKE Workload Identity principal the
    principal sets of its namespace, its pool and the clusters it runs in (`clusters`: each one's
    https://container.googleapis.com/v1/projects/P/locations/L/clusters/C)."""
    found = {principal}
    if hit := _WORKLOAD.match(principal):
        pool = f"principalSet://iam.googleapis.com/{hit['pool']}"
        found |= {f"{pool}/namespace/{hit['ns']}", f"{pool}/*"}
        found |= {f"{pool}/kubernetes.cluster/{cluster}" for cluster in clusters}
    return found


def undecided(principal: str, member: str) -> bool:
    """A principal set of the principal's own pool whose members this evaluation cannot tell (by UID, by
    attribute): the principal may be one of them."""
    hit = _WORKLOAD.match(principal)
    if hit is None:
        return False
    pool = f"principalSet://iam.googleapis.com/{hit['pool']}/"
    kind = member.removeprefix(pool).split("/", 1)[0] if member.startswith(pool) else ""
    return kind == "kubernetes.serviceaccount.uid" or kind.startswith("attribute.")


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


def roles_granting(
    policies: Iterable[Any], principal: str, clusters: Iterable[str] = ()
) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """(role, its binding's condition or None) of every binding in these policies that names the principal, and
    (role, member) of every binding through a principal set it may or may not be in (`undecided`). A policy or
    binding of another shape is left out (the caller says unknown where it matters)."""
    members = memberships(principal, clusters)
    found, maybe = [], []
    for policy in policies:
        bindings = policy.get("bindings") if isinstance(policy, dict) else None
        for binding in bindings if isinstance(bindings, list) else []:
            if not isinstance(binding, dict) or not isinstance(binding.get("role"), str):
                continue
            named = {m for m in binding.get("members") or [] if isinstance(m, str)}
            if members & named:
                found.append((binding["role"], binding.get("condition")))
            maybe += [(binding["role"], m) for m in sorted(named) if undecided(principal, m)]
    return found, maybe


def verdict(
    bindings: list[tuple[str, Any]],
    role_permissions: Mapping[str, frozenset[str] | None],
    permission: str,
    name: str,
    kind: str,
    maybe: Iterable[tuple[str, str]] = (),
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
    doubts += [
        f"{role} is granted to {member}, which this evaluation cannot tell the principal in or out of"
        for role, member in maybe
        if permission in (role_permissions.get(role) or frozenset())
    ]
    if doubts:
        return UNKNOWN, "; ".join(doubts)
    return NOT_GRANTED, "no binding of the resource's or the project's policy grants it"


# -- Deny policies (IAM v2): evaluated before allow policies; a deny rule that applies refuses whatever allows ---

PUBLIC = "principalSet://goog/public:all"


def v2_permission(permission: str) -> str:
    """A permission as deny rules name it: `storage.objects.create` is `storage.googleapis.com/objects.create`."""
    service, _, rest = permission.partition(".")
    return f"{service}.googleapis.com/{rest}"


def _names(patterns: Any, permission: str) -> bool:
    """Whether deny-rule permissions (with the wildcards IAM allows: `SERVICE/*`, `SERVICE/RESOURCE.*`,
    `SERVICE/*.ACTION`) name this permission."""
    wanted = v2_permission(permission)
    return any(isinstance(p, str) and fnmatch.fnmatchcase(wanted, p) for p in patterns or [])


def denied(
    policies: Iterable[Any], principal: str, permission: str, name: str, kind: str, clusters: Iterable[str] = ()
) -> tuple[str, str] | None:
    """(NOT_GRANTED, the rule) where a deny rule of these policies (IAM v2 Policy, kind denypolicies) refuses the
    principal this permission on this resource, (UNKNOWN, why) where one might (a principal set not told here, a
    condition not evaluated here, a rule of a shape not known), None where none applies."""
    members = memberships(principal, clusters) | {PUBLIC}
    doubts = []
    for policy in policies:
        rules = policy.get("rules") if isinstance(policy, dict) else None
        for entry in rules if isinstance(rules, list) else []:
            rule = entry.get("denyRule") if isinstance(entry, dict) else None
            if not isinstance(rule, dict):
                continue
            named = {m for m in rule.get("deniedPrincipals") or [] if isinstance(m, str)}
            excepted = {m for m in rule.get("exceptionPrincipals") or [] if isinstance(m, str)}
            if members & excepted or not _names(rule.get("deniedPermissions"), permission):
                continue
            if _names(rule.get("exceptionPermissions"), permission):
                continue
            where = f"deny policy {policy.get('name') or policy.get('displayName') or '?'}"
            sure = bool(members & named)
            if not sure and not any(undecided(principal, m) for m in named):
                continue
            expression = (rule.get("denialCondition") or {}).get("expression")
            holds = True if expression is None else condition_holds(str(expression), name, kind)
            if sure and holds:
                return NOT_GRANTED, f"denied by {where}"
            if holds is not False:
                doubts.append(f"{where} may deny it (a principal set or condition not evaluated here)")
    return (UNKNOWN, "; ".join(doubts)) if doubts else None
