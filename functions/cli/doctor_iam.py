"""`raytune doctor`'s IAM questions, asked of Google: another identity's access through Policy Troubleshooter,
a Workload Identity principal (which Troubleshooter does not take) evaluated from the allow policies, and the
caller's own permissions through testIamPermissions. The project's policy and each role are read once."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from functions.adapters.google_rest import GoogleRest
from functions.core import doctor as d
from functions.core import errors, iam_policy
from functions.core.doctor import Finding

VERSION_3 = {"options": {"requestedPolicyVersion": 3}}  # conditional bindings come whole


@dataclass
class IamQuestions:
    rest: GoogleRest
    project: str
    # The deployment's GKE clusters, as Workload Identity names them (each one's principal set).
    clusters: tuple[str, ...] = ()
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _policies: dict[str, Any] = field(default_factory=dict, repr=False)  # what `once` read, by what it is
    _roles: dict[str, frozenset[str] | None] = field(default_factory=dict, repr=False)  # roles.get, once a role

    def access(self, access: d.Access) -> Finding:
        """Another identity's access: Policy Troubleshooter evaluates its grants, conditions included; a Workload
        Identity principal, which it does not take, is evaluated here from the policies (iam_policy)."""
        assert access.principal is not None
        if access.principal.startswith("principal://"):
            return self.evaluated(access)
        principal = access.principal.removeprefix("serviceAccount:")
        tuple_ = {"principal": principal, "fullResourceName": access.full_name, "permission": access.permission}
        try:
            answer = self.rest.post("policytroubleshooter", "v3/iam:troubleshoot", {"accessTuple": tuple_})
        except errors.ControllerError as exc:
            return d.access_finding(access, None, errors.describe(exc, 200))
        return d.access_finding(access, answer.get("overallAccessState"))

    def evaluated(self, access: d.Access) -> Finding:
        """As IAM decides: deny policies first (the project's and its ancestors'), then the allow policies of the
        resource, the project and its ancestors. What could not be read leaves the answer unknown, never ok and
        never a problem it might not be."""
        assert access.principal is not None
        service, _, name = access.full_name.removeprefix("//").partition("/")
        try:
            policies = [self.project_policy(), self.resource_policy(service, name)]
        except errors.ControllerError as exc:
            return d.access_finding(access, None, f"could not read its IAM policies: {errors.describe(exc, 200)}")
        inherited, unread = self.ancestor_policies()
        bindings, maybe = iam_policy.roles_granting([*policies, *inherited], access.principal, self.clusters)
        roles = {role: self.role_permissions(role) for role in {r for r, _ in bindings} | {r for r, _ in maybe}}
        kind = f"{service}/{'Object' if '/objects/' in name else 'Bucket'}" if service.startswith("storage") else ""
        verdict, why = iam_policy.verdict(bindings, roles, access.permission, name, kind, maybe)
        if verdict == iam_policy.NOT_GRANTED and unread:
            verdict, why = iam_policy.UNKNOWN, f"{why}, and {'; '.join(unread)}"
        denies, deny_unread = self.deny_policies()
        refused = iam_policy.denied(denies, access.principal, access.permission, name, kind, self.clusters)
        if refused is not None:
            verdict, why = refused
        elif verdict == iam_policy.GRANTED and deny_unread:
            verdict, why = iam_policy.UNKNOWN, f"{why} allows it, but {'; '.join(deny_unread)}"
        state = {iam_policy.GRANTED: "CAN_ACCESS", iam_policy.NOT_GRANTED: "CANNOT_ACCESS"}.get(verdict)
        return d.access_finding(access, state, why)

    def ancestry(self) -> list[tuple[str, str]]:
        """The project's folders and organization, nearest first (Resource Manager getAncestry), read once."""

        def read() -> list[tuple[str, str]]:
            answer = self.rest.post("cloudresourcemanager", f"v1/projects/{self.project}:getAncestry", {})
            found = [
                (str(a["resourceId"]["type"]), str(a["resourceId"]["id"]))
                for a in (answer.get("ancestor") or [] if isinstance(answer, dict) else [])
                if isinstance(a, dict) and isinstance(a.get("resourceId"), dict)
            ]
            return [(kind, id_) for kind, id_ in found if kind != "project"]

        return list(self.once("ancestry", read))

    def ancestor_policies(self) -> tuple[list[Any], list[str]]:
        """The allow policies of the project's folders and organization (a grant there is inherited), and why each
        one that could not be read was not."""
        try:
            ancestors = self.ancestry()
        except errors.ControllerError as exc:
            return [], [f"the project's folders and organization could not be read ({errors.describe(exc, 120)})"]
        found, unread = [], []
        for kind, id_ in ancestors:
            path = f"v2/folders/{id_}:getIamPolicy" if kind == "folder" else f"v1/organizations/{id_}:getIamPolicy"
            try:
                found.append(self.once(path, lambda p=path: self.rest.post("cloudresourcemanager", p, VERSION_3)))
            except errors.ControllerError as exc:
                unread.append(f"the allow policy of {kind} {id_} could not be read ({errors.describe(exc, 120)})")
        return found, unread

    def deny_policies(self) -> tuple[list[Any], list[str]]:
        """The deny policies attached to the project and its ancestors (IAM v2), each read whole, and why those
        that could not be read were not."""
        points = [("projects", self.project)]
        try:
            points += [(f"{kind}s", id_) for kind, id_ in self.ancestry()]
        except errors.ControllerError as exc:
            return [], [f"the deny policies above the project could not be read ({errors.describe(exc, 120)})"]
        found, unread = [], []
        for kind, id_ in points:
            attachment = quote(f"cloudresourcemanager.googleapis.com/{kind}/{id_}", safe="")
            try:
                listed = self.once(
                    f"deny {attachment}", lambda a=attachment: self.rest.get("iam", f"v2/policies/{a}/denypolicies")
                )
                for entry in listed.get("policies") or [] if isinstance(listed, dict) else []:
                    named = str(entry.get("name"))
                    found.append(self.once(named, lambda n=named: self.rest.get("iam", f"v2/{n}")))
            except errors.ControllerError as exc:
                unread.append(f"the deny policies of {kind[:-1]} {id_} could not be read ({errors.describe(exc, 120)})")
        return found, unread

    def once(self, key: str, read: Any) -> Any:
        """An answer read once for the whole doctor run (a policy every question inherits): the questions run at
        once, so the first reads it while the others wait for it. A read that raised is read again next time."""
        with self._lock:
            if key not in self._policies:
                self._policies[key] = read()
            return self._policies[key]

    def project_policy(self) -> Any:
        """The project's allow policy, read once (every Workload Identity question inherits from it)."""
        path = f"v1/projects/{self.project}:getIamPolicy"
        return self.once("project", lambda: self.rest.post("cloudresourcemanager", path, VERSION_3))

    def resource_policy(self, service: str, name: str) -> Any:
        """The allow policy of a bucket (an object's is its bucket's) or a topic."""
        if service == "storage.googleapis.com":
            bucket = name.removeprefix("projects/_/buckets/").split("/", 1)[0]
            return self.rest.get("storage", f"storage/v1/b/{bucket}/iam", {"optionsRequestedPolicyVersion": 3})
        if service == "pubsub.googleapis.com":
            return self.rest.get("pubsub", f"v1/{name}:getIamPolicy", {"options.requestedPolicyVersion": 3})
        if service == "cloudresourcemanager.googleapis.com":
            return None  # the project's own, read already
        raise errors.PermanentError(f"no policy of {service} resources is read here")

    def role_permissions(self, role: str) -> frozenset[str] | None:
        """A role's permissions as IAM's roles.get answers them (predefined roles/X, custom projects/P/roles/X)."""
        with self._lock:
            if role in self._roles:
                return self._roles[role]
        try:
            answer = self.rest.get("iam", f"v1/{role}")
            listed = answer.get("includedPermissions") if isinstance(answer, dict) else None
            found = frozenset(p for p in listed if isinstance(p, str)) if isinstance(listed, list) else None
        except errors.ControllerError:
            found = None
        with self._lock:
            self._roles[role] = found
        return found

    @staticmethod
    def caller_groups(accesses: list[d.Access]) -> dict[str, list[d.Access]]:
        groups: dict[str, list[d.Access]] = {}
        for access in accesses:
            if access.principal is None:
                groups.setdefault(access.full_name, []).append(access)
        return groups

    def callers(self, full_name: str, group: list[d.Access]) -> list[Finding]:
        """The caller's own permissions on one resource, in one testIamPermissions."""
        wanted = sorted({a.permission for a in group})
        service, _, name = full_name.removeprefix("//").partition("/")
        try:
            if service == "storage.googleapis.com":
                bucket = name.removeprefix("projects/_/buckets/")
                answer = self.rest.get("storage", f"storage/v1/b/{bucket}/iam/testPermissions", {"permissions": wanted})
            else:
                api = {"pubsub.googleapis.com": ("pubsub", "v1"), "iam.googleapis.com": ("iam", "v1")}
                api |= {"cloudresourcemanager.googleapis.com": ("cloudresourcemanager", "v1")}
                short, version = api[service]
                answer = self.rest.post(short, f"{version}/{name}:testIamPermissions", {"permissions": wanted})
        except (errors.ControllerError, KeyError) as exc:
            said = errors.describe(exc, 200)
            return [d.access_finding(a, None, said) for a in group]
        held = set(answer.get("permissions", []))
        return [d.access_finding(a, "CAN_ACCESS" if a.permission in held else "CANNOT_ACCESS") for a in group]
