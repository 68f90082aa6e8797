"""Where the operator commands act: the deployed controller (the runs and configs buckets, the launch and
watch topics, the GKE cluster's Kubernetes API) or a `raytune local` workdir. Both give the same answers:
run records, how to submit and cancel, the job's status, its pods and its driver log."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from functions.adapters.store import RunStore
from functions.cli import tokens
from functions.core import runids, stuck
from functions.core.allocation import group_name
from functions.core.config import RunConfig
from functions.core.config_file import config_format, parse_config
from functions.core.errors import Unreadable
from functions.core.policy import CANCEL_DIGEST_ATTRIBUTE, OPERATOR_KEY_ATTRIBUTE
from functions.core.runs import RunRecord
from functions.local import command, workdirs
from functions.local.dirblobs import DirBlobs
from functions.local.eventing import BUCKET
from functions.local.platform import live_driver_log


class RetryEnded(Exception):
    """A local retry ran to its end without succeeding: its exit code."""

    def __init__(self, code: int):
        super().__init__(f"the retried run ended with exit code {code}")
        self.code = code


class Backend(Protocol):
    store: RunStore
    where: str

    def submit(self, config: Path, name: str | None, via_topic: bool) -> str: ...
    def cancel(self, record: RunRecord, token: str | None = None) -> None: ...
    def retry(self, record: RunRecord, token: str | None = None) -> None: ...
    def job(self, record: RunRecord) -> dict[str, Any] | None: ...
    def pods(self, record: RunRecord) -> list[str]: ...
    def log(self, record: RunRecord) -> str: ...
    def orphaned(self, record: RunRecord) -> str | None: ...
    def writable(self) -> AbstractContextManager[RunStore]: ...


def records(store: RunStore) -> list[RunRecord]:
    """Every run record, newest first (quarantined ones are not records)."""
    names = [n for n in store.blobs.list("runs/") if n.endswith(".json") and n.count("/") == 1]
    found = []
    for name in names:
        try:
            record = store.get(name.removeprefix("runs/").removesuffix(".json"))
        except Unreadable:
            continue
        if record is not None:
            found.append(record)
    return sorted(found, key=lambda r: r.created_at, reverse=True)


class CloudBackend:
    def __init__(self, settings: Any, platform: Any = None, publisher: Any = None):
        from functions.adapters.gcs import Bucket

        settings.need("runs_bucket")
        self.settings = settings
        self.store = RunStore(Bucket(settings.runs_bucket))
        self.where = f"gs://{settings.runs_bucket}"
        self._platform = platform
        self._publisher = publisher

    @contextlib.contextmanager
    def writable(self) -> Iterator[RunStore]:
        """The runs bucket, written by compare-and-swap as the functions write it."""
        yield self.store

    @property
    def platform(self) -> Any:
        if self._platform is None:
            from functions.adapters.gke import GkePlatform
            from functions.adapters.gke_clusters import GkeClusters

            self.settings.need("project")
            self._platform = GkePlatform(self.settings.project, None, clusters=GkeClusters(self.settings.project))
        return self._platform

    @property
    def publisher(self) -> Any:
        if self._publisher is None:
            from functions.adapters.pubsub import Publisher

            self._publisher = Publisher()
        return self._publisher

    def submit(self, config: Path, name: str | None, via_topic: bool) -> str:
        raw = config.read_bytes()
        cfg = parse_config(raw, config_format(config.name))  # refused here, before anything is sent
        token, digest = tokens.new()
        if via_topic:
            self.settings.need("launch_topic")
            body: dict[str, Any] = {"config": json.loads(cfg.model_dump_json(exclude_defaults=True))}
            if name:
                body["run_name"] = name
            message_id = self.publisher.publish(self.settings.launch_topic, body, **{CANCEL_DIGEST_ATTRIBUTE: digest})
            run_id = runids.for_message(message_id, name)
        else:
            from functions.adapters.gcs import storage_client

            self.settings.need("configs_bucket")
            suffix = config.suffix.lower() if config.suffix.lower() in (".json", ".yaml", ".yml") else ".json"
            object_name = f"configs/{name or cfg.name}{suffix}"
            blob = storage_client().bucket(self.settings.configs_bucket).blob(object_name)
            blob.metadata = {CANCEL_DIGEST_ATTRIBUTE: digest}  # in the finalize event's object metadata
            blob.upload_from_string(raw, timeout=60)
            run_id = runids.for_object(self.settings.configs_bucket, object_name, blob.generation)
        tokens.keep(run_id, token)
        return run_id

    def cancel(self, record: RunRecord, token: str | None = None) -> None:
        self._ask("cancel", record, token)

    def retry(self, record: RunRecord, token: str | None = None) -> None:
        self._ask("retry", record, token)

    def _ask(self, kind: str, record: RunRecord, token: str | None) -> None:
        """A watch message about one run, with the submitter's token or the operator key (policy.may_cancel)."""
        self.settings.need("watch_topic")
        attributes = {OPERATOR_KEY_ATTRIBUTE: self.settings.operator_key} if self.settings.operator_key else {}
        body = {"kind": kind, "run_id": record.run_id}
        if token := token or tokens.find(record.run_id):
            body["token"] = token
        self.publisher.publish(self.settings.watch_topic, body, **attributes)

    def _cfg(self, record: RunRecord) -> RunConfig | None:
        return record.run_config() if record.config else None

    def job(self, record: RunRecord) -> dict[str, Any] | None:
        cfg = self._cfg(record)
        return None if cfg is None else self.platform.job_status(cfg, record.job_name)

    def pods(self, record: RunRecord) -> list[str]:
        cfg = self._cfg(record)
        if cfg is None:
            return []
        kube = self.platform.reachable(cfg.cluster)
        if kube is None:
            return []
        lines = []
        listed = kube.pods(cfg.cluster.namespace, f"ray.io/cluster={cfg.cluster.ray_cluster}")
        for pod in stuck.own_pods(listed, group_name(record.run_id)):  # other runs' groups share the RayCluster
            status = pod.get("status") or {}
            waiting = [
                (cs.get("state") or {}).get("waiting", {}).get("reason")
                for cs in status.get("containerStatuses") or []
                if (cs.get("state") or {}).get("waiting")
            ]
            lines.append(
                f"{pod['metadata']['name']}: {status.get('phase', '?')}"
                + (f" ({', '.join(waiting)})" if waiting else "")
            )
        return lines

    def orphaned(self, record: RunRecord) -> str | None:
        return None  # the watcher follows every cloud run

    def log(self, record: RunRecord) -> str:
        """The job's driver log: as kept in the runs bucket once the attempt ended (its RayJob and submitter pod
        go), else live from KubeRay's submitter pod (it runs `ray job submit` and follows the logs)."""
        if (kept := self.store.log(record.run_id, record.job_name)) is not None:
            return kept
        cfg = self._cfg(record)
        kube = self.platform.reachable(cfg.cluster) if cfg else None
        if cfg is None or kube is None:
            return ""
        return kube.job_log(cfg.cluster.namespace, record.job_name)


class LocalBackend:
    """A `raytune local` workdir: its records as fake-gcs-server keeps them on disk, its driver logs, and its
    driver process (cancel = the interrupt the driver turns into a cancel)."""

    def __init__(self, workdir: Path | None = None):
        self.workdir = (workdir or workdirs.DEFAULT_WORKDIR).resolve()
        self.store = RunStore(DirBlobs(self.workdir / "gcs" / BUCKET))
        self.where = str(self.workdir)

    def submit(self, config: Path, name: str | None, via_topic: bool) -> str:
        raise RuntimeError(f"locally a run is started with: raytune local {config} --workdir {self.workdir}")

    def cancel(self, record: RunRecord, token: str | None = None) -> None:
        """Interrupt the raytune local that holds the workdir (it cancels its run); a run whose raytune local died
        is settled here instead, as its next raytune local would: its processes stopped, the run cancelled. Only a
        pid proven by the workdir's lock is ever signalled."""
        pid = workdirs.holder(self.workdir)
        if pid == 0:
            raise RuntimeError(f"a raytune local is taking {self.workdir} right now: cancel again in a moment")
        if pid is not None:
            workdirs.ask_cancel(self.workdir, pid, "raytune cancel (from another terminal)")
            return
        if command.run(None, self.workdir, settle_only=True) != 0:
            raise RuntimeError(f"could not settle the runs left in {self.workdir}: see its logs/")

    def orphaned(self, record: RunRecord) -> str | None:
        """Why a live-looking record will never move again: no raytune local holds its workdir."""
        if record.state.terminal or workdirs.holder(self.workdir) is not None:
            return None
        return (
            f"{record.run_id} is {record.state.value} but no raytune local holds {self.workdir} (it ended before the "
            f"run did): `raytune cancel {record.run_id} --workdir {self.workdir}` settles it"
        )

    def retry(self, record: RunRecord, token: str | None = None) -> None:
        """A local run's next attempt needs its cluster again: the driver starts it and follows it."""
        code = command.run(None, self.workdir, retry=record.run_id)
        if code:
            raise RetryEnded(code)

    def job(self, record: RunRecord) -> dict[str, Any] | None:
        return record.job

    def pods(self, record: RunRecord) -> list[str]:
        """The run's own local nodes (the head and its worker group's), as their logs: every earlier run's are
        kept in the same folder."""
        logs = self.workdir / "logs"
        own = [logs / "ray-head.log", *logs.glob(f"ray-worker-{group_name(record.run_id)}-*.log")]
        return sorted(f"{p.stem}: log {p}" for p in own if p.is_file())

    @contextlib.contextmanager
    def writable(self) -> Iterator[RunStore]:
        """The workdir's bucket to write (a champion's rollback): served as `raytune local` serves it, with the
        workdir's lock held, so no run of it writes meanwhile; refused while one does."""
        from functions.adapters.gcs import Bucket
        from functions.local import emulators

        with workdirs.held_if_free(self.workdir) as free:
            if not free:
                raise RuntimeError(f"a raytune local is running in {self.workdir}: try again once it has ended")
            gcs = emulators.fake_gcs(self.workdir / "logs" / "fake-gcs.log", data_dir=self.workdir / "gcs")
            before = os.environ.get("STORAGE_EMULATOR_HOST")
            os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
            try:
                yield RunStore(Bucket(BUCKET))
            finally:
                gcs.stop()
                if before is None:
                    os.environ.pop("STORAGE_EMULATOR_HOST", None)
                else:
                    os.environ["STORAGE_EMULATOR_HOST"] = before

    def log(self, record: RunRecord) -> str:
        saved = self.workdir / "logs" / f"{record.job_name}-driver.log"
        path = saved if saved.is_file() else live_driver_log(self.workdir, record.job_name)
        return path.read_text(errors="replace") if path else ""
