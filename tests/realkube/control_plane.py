"""A real Kubernetes control plane and the real KubeRay operator on loopback, for the contract tier: etcd,
kube-apiserver (RBAC, static tokens, a throwaway CA), kube-controller-manager (job, garbage collector,
namespace, service account, endpoints and replicaset controllers; no scheduler, no node lifecycle), the
KubeRay CRDs and ClusterRole, the operator, and two players that are test infrastructure: kubelet.py (binds
pods, makes Nodes as Autopilot would, runs KubeRay's submitter) and fake_dashboard.py (every Ray head's Jobs
API, reached by the operator through HTTP_PROXY).

The binaries come from a directory named by RAYTUNE_REALKUBE (bin/etcd, bin/kube-apiserver,
bin/kube-controller-manager, bin/kuberay-operator, kuberay/crds/, kuberay/role.yaml): the prebuilt set that
CI unpacks, since nothing can be built from the Go module proxy here. Every port is chosen free; every
process is started in its own session and stopped by its pid, nothing else."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from functions.local import emulators
from functions.local.emulators import free_ports

HERE = Path(__file__).resolve().parent
# The players are on loopback: never through a proxy from the environment (the operator's is the dashboard).
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
ENV = "RAYTUNE_REALKUBE"
CONTROLLERS = ",".join(
    f"{name}-controller"
    for name in (
        "job",
        "garbage-collector",
        "namespace",
        "serviceaccount",
        "endpoints",
        "endpointslice",
        "root-ca-certificate-publisher",
        "replicaset",
    )
)


def binaries() -> Path | None:
    folder = os.environ.get(ENV)
    return Path(folder) if folder and (Path(folder) / "bin" / "kube-apiserver").exists() else None


class CommandFailed(RuntimeError):
    """A start-up command that failed, with what it said (pytest shows the message, not a CalledProcessError's
    swallowed stderr)."""


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        said = (done.stderr or done.stdout or "").strip()[-2000:]
        raise CommandFailed(f"{' '.join(args[:6])} ... exited with {done.returncode}: {said}")
    return done


def _pki(folder: Path) -> None:
    """A CA, the API server's certificate for 127.0.0.1, the service-account key, and three bearer tokens."""
    folder.mkdir(parents=True)
    ssl = ["openssl"]
    _run([*ssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
          "-subj", "/CN=realkube-ca"], cwd=folder)  # fmt: skip
    _run([*ssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
          "-subj", "/CN=kube-apiserver"], cwd=folder)  # fmt: skip
    (folder / "apiserver.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n"
    )
    _run([*ssl, "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
          "-out", "apiserver.crt", "-days", "2", "-extfile", "apiserver.ext"], cwd=folder)  # fmt: skip
    _run([*ssl, "genrsa", "-out", "sa.key", "2048"], cwd=folder)
    _run([*ssl, "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], cwd=folder)
    lines = []
    for who, groups in (("admin", "system:masters"), ("kcm", "system:masters"), ("kuberay", "")):
        token = os.urandom(24).hex()
        (folder / f"{who}.token").write_text(token)
        name = {"kcm": "system:kube-controller-manager", "kuberay": "kuberay-operator"}.get(who, who)
        lines.append(f"{token},{name},uid-{who}" + (f",{groups}" if groups else ""))
    (folder / "tokens.csv").write_text("\n".join(lines) + "\n")


@dataclass
class ControlPlane:
    """One started control plane; `api` is its https URL, `token` the admin's bearer token."""

    bin: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rk-")))
    procs: dict[str, emulators.Service] = field(default_factory=dict)

    def __post_init__(self):
        self.api_port, self.etcd_port, self.peer_port, self.dashboard_port, self.logs_port = free_ports(5)
        self.pki = self.root / "pki"
        self.logs = self.root / "logs"

    @property
    def api(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca(self) -> str:
        return str(self.pki / "ca.crt")

    @property
    def token(self) -> str:
        return (self.pki / "admin.token").read_text().strip()

    def client(self):
        """A Kubernetes API client of this plane, made as the controller makes one (its kube adapter's)."""
        from functions.adapters.kube import api_client

        return api_client(self.api, token=lambda: self.token, ca_file=self.ca)

    def kube(self):
        """raytune's Kube adapter on this plane."""
        from functions.adapters.kube import Kube

        return Kube(self.client())

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}/-/"

    def _kubeconfig(self, who: str) -> Path:
        path = self.root / f"{who}.kubeconfig"
        token = (self.pki / f"{who}.token").read_text().strip()
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "rk", "cluster": {"server": self.api, "certificate-authority": self.ca}}],
                    "users": [{"name": who, "user": {"token": token}}],
                    "contexts": [{"name": "rk", "context": {"cluster": "rk", "user": who}}],
                    "current-context": "rk",
                }
            )
        )
        path.chmod(0o600)
        return path

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """Started in its own session (functions/local/emulators.py), killed by the kernel if the thread that
        starts the plane ends (tests/realkube/session.py keeps it until the run ends); readiness is each caller's
        `_wait`."""
        self.procs[name] = emulators.start(
            args, 0, self.logs / f"{name}.log", env=env, ready=lambda: True, dies_with_starter=True
        )

    def _wait(self, what: str, ready, timeout_s: float = 120) -> None:
        """Poll `ready` until it holds; a process that exits, or the time running out, fails with what the
        last try said (a command's stderr) and the logs' folder."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            for name, service in self.procs.items():
                if service.proc.poll() is not None:
                    tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"{name} exited with {service.proc.returncode} before {what}:\n{tail}")
            try:
                if ready():
                    return
            except Exception as exc:
                last = exc
            time.sleep(0.25)
        said = f"; the last try said: {last}" if last else ""
        raise TimeoutError(f"{what} not ready after {timeout_s}s (logs in {self.logs}){said}")

    def established(self, crd: str, timeout_s: float = 60) -> None:
        """Wait for a CRD's Established condition by reading it: `kubectl wait --for condition=Established` on a
        CRD just applied exits 1 at once while its status has no conditions yet (kubernetes/kubernetes#66439)."""

        def ready() -> bool:
            found = json.loads(self.kubectl("get", "crd", crd, "-o", "json"))
            conditions = (found.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

        self._wait(f"the CRD {crd} established", ready, timeout_s)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return _run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--request-timeout=20s", *args], input=stdin
        ).stdout

    def _get(self, url: str) -> bool:
        with DIRECT.open(url, timeout=2) as response:
            return response.status == 200

    def start(self, kubelet_args: tuple[str, ...] = ()) -> ControlPlane:
        _pki(self.pki)
        for who in ("admin", "kcm", "kuberay"):
            self._kubeconfig(who)
        self._start(
            "etcd",
            [str(self.bin / "bin/etcd"), "--name", "rk", "--data-dir", str(self.root / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", f"rk=http://127.0.0.1:{self.peer_port}"],
        )  # fmt: skip
        self._wait("etcd", lambda: self._get(f"http://127.0.0.1:{self.etcd_port}/health"), 30)
        self._start(
            "kube-apiserver",
            [str(self.bin / "bin/kube-apiserver"), "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}",
             "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.api_port),
             "--tls-cert-file", str(self.pki / "apiserver.crt"), "--tls-private-key-file", str(self.pki / "apiserver.key"),
             "--client-ca-file", self.ca, "--token-auth-file", str(self.pki / "tokens.csv"),
             "--authorization-mode", "RBAC", "--anonymous-auth=false",
             "--service-account-key-file", str(self.pki / "sa.pub"),
             "--service-account-signing-key-file", str(self.pki / "sa.key"),
             "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
             "--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
             "--kubelet-preferred-address-types", "InternalIP", "--kubelet-timeout", "5s",
             "--allow-privileged=true", "--profiling=false", "--v=1"],
        )  # fmt: skip
        self._wait("kube-apiserver", lambda: self.kubectl("get", "--raw", "/readyz").strip() == "ok")
        self._start(
            "kube-controller-manager",
            [str(self.bin / "bin/kube-controller-manager"), "--kubeconfig", str(self.root / "kcm.kubeconfig"),
             "--leader-elect=false", "--secure-port", "0", "--controllers", CONTROLLERS,
             "--root-ca-file", self.ca, "--service-account-private-key-file", str(self.pki / "sa.key"),
             "--use-service-account-credentials=false", "--concurrent-gc-syncs", "2", "--v=1"],
        )  # fmt: skip
        self._wait("the default ServiceAccount", lambda: bool(self.kubectl("-n", "default", "get", "sa", "default")))
        crds = self.bin / "kuberay" / "crds"
        self._wait(
            "the KubeRay CRDs",
            lambda: self.kubectl("apply", "--server-side", "--force-conflicts", "--validate=false", "-f", str(crds)),
        )
        for crd in ("rayclusters.ray.io", "rayjobs.ray.io"):
            self.established(crd)
        self.kubectl("apply", "--server-side", "--validate=false", "-f", str(self.bin / "kuberay" / "role.yaml"))
        self.kubectl("create", "clusterrolebinding", "kuberay-operator", "--clusterrole", "kuberay-operator",
                     "--user", "kuberay-operator")  # fmt: skip
        python = sys.executable
        self._start(
            "fake-dashboard",
            [python, str(HERE / "fake_dashboard.py"), "--port", str(self.dashboard_port),
             "--state", str(self.root / "dashboard.json")],
        )  # fmt: skip
        self._wait("the fake dashboard", lambda: self._get(self.dashboard + "healthz"), 20)
        proxy = f"http://127.0.0.1:{self.dashboard_port}"
        self._start(
            "kuberay-operator",
            [str(self.bin / "bin/kuberay-operator"), "--kubeconfig", str(self.root / "kuberay.kubeconfig"),
             "--metrics-addr", "0", "--health-probe-bind-address", "0", "--enable-leader-election=false",
             "--log-stdout-encoder", "console"],
            env={"HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"},
        )  # fmt: skip
        self._wait(
            "the KubeRay operator", lambda: "Starting workers" in (self.logs / "kuberay-operator.log").read_text(), 60
        )
        self.start_kubelet(kubelet_args)
        return self

    def start_kubelet(self, args: tuple[str, ...] = ()) -> None:
        """(Re)start the node player, with `args` (e.g. --no-capacity-for LABEL) for the scenarios that need them."""
        if (old := self.procs.pop("kubelet", None)) is not None:
            old.stop()
        self._start(
            "kubelet",
            [sys.executable, str(HERE / "kubelet.py"), "--kubeconfig", str(self.kubeconfig),
             "--dashboard-port", str(self.dashboard_port), "--serve-logs-port", str(self.logs_port),
             "--tls-cert", str(self.pki / "apiserver.crt"), "--tls-key", str(self.pki / "apiserver.key"),
             "--provision-delay", "1", "--kill-delay", "0.5", "--poll", "0.25", *args],
        )  # fmt: skip
        self._wait("the node player", lambda: bool(self.kubectl("get", "node", "rk-node-cpu")), 30)

    @contextmanager
    def sharing(self, exclusive: bool = False) -> Iterator[None]:
        """The run's processes share one control plane: a test that changes what is cluster-wide (a CRD) holds it
        alone, the others together (a lock file beside it, flock)."""
        with open(self.root / "cluster-scoped.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def info(self) -> dict:
        """What another process of the test run needs to use this control plane (attach)."""
        return {"bin": str(self.bin), "root": str(self.root), "ports": [self.api_port, self.dashboard_port]}

    @classmethod
    def attach(cls, info: dict) -> ControlPlane:
        """This control plane, started by another process of the test run: its API, files and players, not its
        processes (the process that started it stops it)."""
        plane = cls(Path(info["bin"]), Path(info["root"]))
        plane.api_port, plane.dashboard_port = info["ports"]
        return plane

    def stop(self) -> None:
        """Every process, then its folder (etcd's data, certificates, logs: about 76 MB a session)."""
        for name in reversed(list(self.procs)):
            self.procs.pop(name).stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def logged(self, who: str, namespace: str) -> list[str]:
        """The lines a process of the plane (kuberay-operator, kubelet, ...) logged about one namespace."""
        text = (self.logs / f"{who}.log").read_text(errors="replace")
        return [line for line in text.splitlines() if namespace in line]

    def told(self, namespace: str, lines: int = 30) -> str:
        """What the KubeRay operator (its errors) and the node player logged about one namespace, the last lines of
        each: for a failed test's report, since the plane's folder goes with it."""
        said = []
        for who, kept in (("kuberay-operator", lambda line: "\terror\t" in line), ("kubelet", lambda line: True)):
            found = [line[:400] for line in self.logged(who, namespace) if kept(line)]
            said += [f"-- {who}.log on {namespace}: {len(found)} lines, the last {lines}:", *found[-lines:]]
        return "\n".join(said)

    # -- the dashboard player's control API: how tests end jobs ------------------------------------------------

    def _control(self, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            self.dashboard + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="GET" if body is None else "POST",
        )
        with DIRECT.open(request, timeout=5) as response:
            return json.loads(response.read() or b"{}")

    def jobs(self) -> dict:
        """Every submitted job: {"<ns>/<head svc>": {submission id: info}}."""
        return self._control("state").get("jobs") or {}

    def set_job(self, namespace: str, head_service: str, submission_id: str, status: str, message: str = "") -> None:
        body = {"status": status, **({"message": message} if message else {})}
        self._control(f"jobs/{namespace}/{head_service}/{submission_id}", body)
