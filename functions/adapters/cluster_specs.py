"""RayClusters listed by what changed. A RayCluster of a run pool carries every run's worker group with its pod
template (some 1.3 KB a group): listing them whole on every tick costs what exists, not what changed. A warm
function instance remembers each RayCluster's spec with the uid and metadata.generation it was read at, and its
next listing asks for their metadata alone (Accept ...;as=PartialObjectMetadataList, some 3 KB a RayCluster):
the API server moves a custom resource's generation on every change to its spec and never on a status write
(tests/contract/test_kube_servers.py holds the real one to it), so a RayCluster at the remembered uid and
generation has the remembered spec, and the rest comes fresh from the listing (resourceVersion, labels,
annotations: what writes are conditional on). Those that changed are read again. A status is not in a metadata
listing: what is kept of it is KubeRay's `ready`, which it never takes back once written; a RayCluster not yet
seen ready is read again until it is (the readiness hold reads a new one's pods meanwhile anyway). A plain value:
the client that owns it (functions/adapters/kube.py) hands it its three reads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

Listing = Callable[[], list[dict[str, Any]]]

# More changed RayClusters than this in one namespace are read by one listing, not one read each.
CHANGED_READS_MAX = 4


READY = {"state": "ready"}  # KubeRay's status of a RayCluster that has been ready, as a listing would carry it


class Kept(NamedTuple):
    uid: str
    generation: int
    spec: dict[str, Any]
    ready: bool  # KubeRay called it ready (never taken back)


class ClusterSpecs:
    """One GKE cluster's RayCluster specs as last read, by (namespace, name)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], Kept] = {}
        self._lock = threading.Lock()  # the tick lists its namespaces from several threads

    def listed(
        self,
        namespace: str,
        metadata: Listing,
        whole: Listing,
        read: Callable[[str], dict[str, Any] | None],
    ) -> list[dict[str, Any]]:
        """The namespace's RayClusters, each its metadata, spec and (of its status) whether KubeRay called it ready:
        `metadata` lists their metadata alone, `whole` lists them whole, `read` reads one by name (None: gone)."""
        with self._lock:
            known = {name: kept for (ns, name), kept in self._kept.items() if ns == namespace}
        found = None
        if known:  # a namespace never read (a fresh instance) is listed whole at once
            partial = metadata()
            changed = [item["metadata"]["name"] for item in partial if not _same(known, item["metadata"])]
            if len(changed) <= CHANGED_READS_MAX:
                fresh = {name: read(name) for name in changed}
                found = []
                for item in partial:
                    meta = item["metadata"]
                    cluster = (
                        fresh[meta["name"]]
                        if meta["name"] in fresh
                        else {"metadata": meta, "spec": known[meta["name"]].spec, "status": READY}
                    )
                    if cluster is not None:  # None: deleted since it was listed
                        found.append(cluster)
        if found is None:
            found = whole()
        with self._lock:
            for key in [key for key in self._kept if key[0] == namespace]:
                del self._kept[key]
            for cluster in found:
                meta = cluster["metadata"]
                if isinstance(meta.get("generation"), int) and meta.get("uid"):
                    ready = (cluster.get("status") or {}).get("state") == READY["state"]
                    key = (namespace, meta["name"])
                    self._kept[key] = Kept(meta["uid"], meta["generation"], cluster["spec"], ready)
        return found


def _same(known: dict[str, Kept], meta: dict[str, Any]) -> bool:
    """Whether what is kept of it stands: the same object and spec, and already ready (until then its status is
    news a metadata listing does not carry)."""
    kept = known.get(meta["name"])
    return kept is not None and kept.ready and (kept.uid, kept.generation) == (meta.get("uid"), meta.get("generation"))
