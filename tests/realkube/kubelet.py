#!/usr/bin/env python3
"""Plays the nodes of the real control plane that up.sh starts (there is no kubelet and no scheduler).

Every poll (default 0.5 s) it:
  * schedules: binds each unscheduled pod (pods/binding) to a Node whose labels satisfy its nodeSelector.
    With --autopilot (default) a missing node is provisioned the way GKE Autopilot does: a Node with
    exactly the selector's labels appears after --provision-delay seconds (a FailedScheduling event is
    written meanwhile, as the real scheduler writes). --no-autopilot leaves such pods Pending.
  * runs: a bound Pending pod becomes Running and Ready (status subresource) with a fake pod IP from
    TEST-NET-2 (198.51.100.0/24: data only, nothing ever connects to it).
  * serves Ray heads: when a head pod is Ready, the Services that select it are marked up in
    fake_dashboard.py; when it goes, they are marked down.
  * runs KubeRay's submitter: a submitter pod (RAY_JOB_SUBMISSION_ID / RAY_DASHBOARD_ADDRESS in its env)
    submits its job to the fake dashboard when it starts (it fails, exit 1, if that dashboard is down),
    and ends when the Ray job ends: Succeeded (exit 0) for SUCCEEDED, Failed (exit 1) otherwise.
    With --job-seconds N a submitted job goes RUNNING at once and SUCCEEDED N seconds later; without
    it the job stays PENDING until someone posts a status to the dashboard's control API.
  * terminates: a pod with a deletionTimestamp is deleted for good (grace 0) after min(grace, --kill-delay).
It renews each Node's Ready condition and writes nothing else. Stop it with SIGTERM (down.sh does).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import ipaddress
import json
import os
import signal
import sys
import time
import urllib.request
import uuid

from kubernetes import client, config
from kubernetes.client.rest import ApiException

NODE_PREFIX = "rk-node-"
STOP = False


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg: str) -> None:
    print(f"{now()} {msg}", flush=True)


class Dashboard:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}/-/"

    def _call(self, path: str, body: dict | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(
            self.base + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="GET" if body is None else "POST",
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        try:
            with opener.open(req, timeout=5) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def head(self, ns: str, svc: str, up: bool) -> None:
        self._call(f"heads/{ns}/{svc}", {"up": up})

    def state(self) -> dict:
        return self._call("state")[1]

    def submit(self, ns: str, svc: str, sid: str, entrypoint: str) -> int:
        return self._call(f"submit/{ns}/{svc}", {"submission_id": sid, "entrypoint": entrypoint})[0]

    def set_job(self, ns: str, svc: str, sid: str, status: str) -> None:
        self._call(f"jobs/{ns}/{svc}/{sid}", {"status": status})


def selector_ok(labels: dict, selector: dict) -> bool:
    return all(labels.get(k) == v for k, v in (selector or {}).items())


class Kubelet:
    def __init__(self, args):
        config.load_kube_config(args.kubeconfig)
        self.api = client.CoreV1Api()
        self.args = args
        self.dash = Dashboard(args.dashboard_port)
        self.pending_nodes: dict[str, float] = {}  # node name -> when it may appear
        self.ip_index = 10
        self.submitted: dict[str, float] = {}  # pod uid -> when the job was submitted
        self.heads_up: dict[str, set] = {}  # pod uid -> {(ns, svc)}
        self.last_heartbeat = 0.0
        self.told: set = set()

    # --- nodes -------------------------------------------------------------------------------------
    def node_for(self, labels: dict, nodes: list) -> str | None:
        for n in nodes:
            if selector_ok(n.metadata.labels or {}, labels) and not n.spec.unschedulable:
                return n.metadata.name
        return None

    def create_node(self, name: str, labels: dict) -> None:
        gpu = "nvidia.com/gpu"
        capacity = {"cpu": "224", "memory": "3968Gi", "pods": "110", "ephemeral-storage": "10Ti", gpu: "8"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    **labels,
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "realkube.dev/fake": "true",
                },
            },
            "spec": {},
        }
        try:
            self.api.create_node(node)
        except ApiException as e:
            if e.status != 409:
                raise
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                # The API server reaches "the kubelet" (pod logs) here: kubelet.py's log server on 127.0.0.1.
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.args.serve_logs_port}},
                "conditions": [self.ready_condition()],
                "nodeInfo": {
                    "kubeletVersion": "v1.36.2-fake",
                    "containerRuntimeVersion": "fake://1",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "kernelVersion": "fake",
                    "osImage": "fake",
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": str(uuid.uuid4()),  # a real kubelet reports its machine's boot; a new VM has another
                },
            }
        }
        self.api.patch_node_status(name, status)
        log(f"node {name} registered with labels {labels}")

    @staticmethod
    def ready_condition() -> dict:
        return {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "fake kubelet is posting ready status",
            "lastHeartbeatTime": now(),
            "lastTransitionTime": now(),
        }

    def heartbeat(self, nodes: list) -> None:
        if time.time() - self.last_heartbeat < 30:
            return
        self.last_heartbeat = time.time()
        for n in nodes:
            if (n.metadata.labels or {}).get("realkube.dev/fake") == "true":
                self.api.patch_node_status(n.metadata.name, {"status": {"conditions": [self.ready_condition()]}})

    # --- pods --------------------------------------------------------------------------------------
    def event(self, pod, reason: str, message: str, etype: str = "Normal", source: str = "default-scheduler") -> None:
        meta = pod.metadata
        ev = {
            "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta.namespace,
                "name": meta.name,
                "uid": meta.uid,
                "apiVersion": "v1",
                "resourceVersion": meta.resource_version,
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": source},
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "count": 1,
        }
        try:
            self.api.create_namespaced_event(meta.namespace, ev)
        except ApiException as e:
            log(f"event {reason} for {meta.namespace}/{meta.name} refused: {e.status}")

    def bind(self, pod, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.metadata.name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.api.create_namespaced_pod_binding(
                pod.metadata.name, pod.metadata.namespace, body, _preload_content=False
            )
            self.event(
                pod, "Scheduled", f"Successfully assigned {pod.metadata.namespace}/{pod.metadata.name} to {node}"
            )
            log(f"bound {pod.metadata.namespace}/{pod.metadata.name} -> {node}")
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    def failed_scheduling(self, pod, nodes: list) -> None:
        """The event the real scheduler writes for a pod no node's labels satisfy."""
        self.event(
            pod,
            "FailedScheduling",
            f"0/{len(nodes)} nodes are available: {len(nodes)} node(s) didn't match "
            "Pod's node affinity/selector. preemption: 0/0 nodes are available.",
            "Warning",
        )

    def schedule(self, pod, nodes: list) -> None:
        selector = pod.spec.node_selector or {}
        node = self.node_for(selector, nodes)
        if node:
            return self.bind(pod, node)
        if not self.args.autopilot or any(k in selector for k in self.args.no_capacity_for):
            if not getattr(pod, "_rk_told", False) and pod.metadata.uid not in self.told:
                self.told.add(pod.metadata.uid)
                self.failed_scheduling(pod, nodes)
                self.event(
                    pod,
                    "NotTriggerScaleUp",
                    "pod didn't trigger scale-up: no capacity (fake Autopilot, --no-capacity-for)",
                    "Normal",
                    source="cluster-autoscaler",
                )
            return
        name = NODE_PREFIX + hashlib.sha256(json.dumps(selector, sort_keys=True).encode()).hexdigest()[:8]
        due = self.pending_nodes.get(name)
        if due is None:
            self.pending_nodes[name] = time.time() + self.args.provision_delay
            self.failed_scheduling(pod, nodes)
            self.event(pod, "TriggeredScaleUp", "pod triggered scale-up (fake Autopilot)", source="cluster-autoscaler")
        elif time.time() >= due:
            self.create_node(name, selector)
            self.pending_nodes.pop(name, None)

    def pod_ip(self) -> str:
        self.ip_index += 1
        return str(ipaddress.ip_address("198.51.100.0") + (self.ip_index + os.getpid()) % 250 + 2)

    def run(self, pod) -> None:
        containers = pod.spec.containers
        ip = self.pod_ip()
        status = {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "hostIP": "198.51.100.1",
                "hostIPs": [{"ip": "198.51.100.1"}],
                "startTime": now(),
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": now()}
                    for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "containerStatuses": [
                    {
                        "name": c.name,
                        "image": c.image,
                        "imageID": f"fake://{c.image}",
                        "containerID": f"fake://{pod.metadata.uid[:8]}-{c.name}",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now()}},
                    }
                    for c in containers
                ],
                "initContainerStatuses": [
                    {
                        "name": c.name,
                        "image": c.image,
                        "imageID": f"fake://{c.image}",
                        "ready": True,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": now(),
                                "finishedAt": now(),
                            }
                        },
                    }
                    for c in (pod.spec.init_containers or [])
                ],
            }
        }
        self.api.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, status)
        for c in containers:
            self.event(pod, "Pulled", f'Container image "{c.image}" already present on machine', source="kubelet")
            self.event(pod, "Started", f"Started container {c.name}", source="kubelet")
        log(f"running {pod.metadata.namespace}/{pod.metadata.name} ip={ip}")

    def finish(self, pod, ok: bool, reason: str) -> None:
        code = 0 if ok else 1
        status = {
            "status": {
                "phase": "Succeeded" if ok else "Failed",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now()},
                    {
                        "type": "ContainersReady",
                        "status": "False",
                        "reason": "PodCompleted",
                        "lastTransitionTime": now(),
                    },
                ],
                "containerStatuses": [
                    {
                        "name": c.name,
                        "image": c.image,
                        "imageID": f"fake://{c.image}",
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": "Completed" if ok else "Error",
                                "message": reason,
                                "startedAt": now(),
                                "finishedAt": now(),
                            }
                        },
                    }
                    for c in pod.spec.containers
                ],
            }
        }
        self.api.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, status)
        log(f"finished {pod.metadata.namespace}/{pod.metadata.name} exit={code} ({reason})")

    @staticmethod
    def submitter_env(pod) -> dict:
        for c in pod.spec.containers:
            env = {e.name: e.value for e in (c.env or []) if e.value is not None}
            if "RAY_JOB_SUBMISSION_ID" in env and "RAY_DASHBOARD_ADDRESS" in env:
                return env
        return {}

    def heads_for(self, pod) -> set:
        labels = pod.metadata.labels or {}
        out = set()
        for svc in self.api.list_namespaced_service(pod.metadata.namespace).items:
            sel = svc.spec.selector or {}
            if sel and selector_ok(labels, sel):
                out.add((pod.metadata.namespace, svc.metadata.name))
        return out

    def step(self) -> None:
        nodes = self.api.list_node().items
        self.heartbeat(nodes)
        ours = {n.metadata.name for n in nodes}
        pods = self.api.list_pod_for_all_namespaces().items
        dstate = None
        for pod in pods:
            meta, spec, phase = pod.metadata, pod.spec, pod.status.phase
            key = f"{meta.namespace}/{meta.name}"
            if meta.deletion_timestamp is not None:
                grace = meta.deletion_grace_period_seconds or 0
                age = (
                    dt.datetime.now(dt.UTC) - (meta.deletion_timestamp - dt.timedelta(seconds=grace))
                ).total_seconds()
                if age >= min(grace, self.args.kill_delay):
                    for ns_svc in self.heads_up.pop(meta.uid, set()):
                        self.dash.head(*ns_svc, False)
                        log(f"dashboard {ns_svc[0]}/{ns_svc[1]} down")
                    try:
                        self.api.delete_namespaced_pod(
                            meta.name,
                            meta.namespace,
                            grace_period_seconds=0,
                            body=client.V1DeleteOptions(grace_period_seconds=0, preconditions={"uid": meta.uid}),
                        )
                        log(f"deleted {key} (grace {grace}s)")
                    except ApiException as e:
                        if e.status not in (404, 409):
                            raise
                continue
            if not spec.node_name:
                self.schedule(pod, nodes)
                continue
            if spec.node_name not in ours:
                continue
            if phase == "Pending":
                self.run(pod)
                continue
            if phase != "Running":
                continue
            labels = meta.labels or {}
            if labels.get("ray.io/node-type") == "head" and meta.uid not in self.heads_up:
                heads = self.heads_for(pod)
                if heads:
                    self.heads_up[meta.uid] = heads
                    for ns_svc in heads:
                        self.dash.head(*ns_svc, True)
                        log(f"dashboard {ns_svc[0]}/{ns_svc[1]} up")
            env = self.submitter_env(pod)
            if env:
                host = env["RAY_DASHBOARD_ADDRESS"].split("//")[-1].split(":")[0]
                svc, ns = host.split(".")[0], host.split(".")[1]
                sid = env["RAY_JOB_SUBMISSION_ID"]
                if meta.uid not in self.submitted:
                    code = self.dash.submit(ns, svc, sid, "(entrypoint of the RayJob)")
                    if code not in (200, 409):
                        self.finish(pod, False, f"ray job submit: dashboard {ns}/{svc} unreachable ({code})")
                        continue
                    self.submitted[meta.uid] = time.time()
                    log(f"submitter {key} submitted {sid} to {ns}/{svc} (answer {code})")
                    if self.args.job_seconds is not None:
                        self.dash.set_job(ns, svc, sid, "RUNNING")
                    continue
                dstate = dstate or self.dash.state()
                job = (dstate.get("jobs", {}).get(f"{ns}/{svc}") or {}).get(sid)
                if job is None:
                    if not (dstate.get("heads") or {}).get(f"{ns}/{svc}"):
                        self.finish(pod, False, "ray job logs: the dashboard went away")
                    continue
                if (
                    self.args.job_seconds is not None
                    and job["status"] == "RUNNING"
                    and time.time() - self.submitted[meta.uid] >= self.args.job_seconds
                ):
                    self.dash.set_job(ns, svc, sid, "SUCCEEDED")
                    continue
                if job["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                    self.finish(pod, job["status"] == "SUCCEEDED", f"Ray job {sid} {job['status']}")


def serve_logs(port: int, cert: str, key: str, dashboard: Dashboard) -> None:
    """GET /containerLogs/<ns>/<pod>/<container> over TLS on 127.0.0.1, as the kubelet answers the API server
    for `kubectl logs`: a submitter pod's log says what its Ray job did, other pods get one line."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) != 4 or parts[0] != "containerLogs":
                self.send_response(404)
                self.end_headers()
                return
            ns, pod, container = parts[1:]
            text = f"fake kubelet: log of {ns}/{pod}/{container}\n"
            if container == "ray-job-submitter":
                for key, jobs in (dashboard.state().get("jobs") or {}).items():
                    for sid, info in jobs.items():
                        if pod.startswith(sid) and key.startswith(ns + "/"):
                            text += f"Job '{sid}' submitted successfully\nStatus for job '{sid}': {info['status']}\n{info.get('message') or ''}\n"
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), H)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    rk = os.environ.get("RK_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "realkube"))
    ap.add_argument("--kubeconfig", default=os.path.join(rk, "run/kubeconfig"))
    ap.add_argument("--dashboard-port", type=int, default=int(os.environ.get("RK_DASHBOARD_PORT", "18265")))
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--kill-delay", type=float, default=1.0, help="seconds a terminating pod takes at most")
    ap.add_argument("--provision-delay", type=float, default=2.0, help="seconds a fake Autopilot node takes to appear")
    ap.add_argument("--no-autopilot", dest="autopilot", action="store_false")
    ap.add_argument(
        "--no-capacity-for",
        action="append",
        default=[],
        metavar="LABEL",
        help="never provision a node for a selector with this label (e.g. cloud.google.com/reservation-name)",
    )
    ap.add_argument(
        "--job-seconds", type=float, default=None, help="drive submitted Ray jobs to SUCCEEDED by themselves"
    )
    ap.add_argument("--pidfile", default=None)
    ap.add_argument("--serve-logs-port", type=int, default=int(os.environ.get("RK_KUBELET_PORT", "18250")))
    ap.add_argument("--tls-cert", default=os.path.join(rk, "run/pki/apiserver.crt"))
    ap.add_argument("--tls-key", default=os.path.join(rk, "run/pki/apiserver.key"))
    ap.add_argument("--max-seconds", type=float, default=None, help="exit after this long (bounded runs)")
    args = ap.parse_args()
    if args.pidfile:
        with open(args.pidfile, "w") as f:
            f.write(str(os.getpid()))

    def stop(*_):
        global STOP
        STOP = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    kubelet = Kubelet(args)
    serve_logs(args.serve_logs_port, args.tls_cert, args.tls_key, kubelet.dash)
    # One schedulable CPU node for heads (no selector), like a default Autopilot compute class node.
    if not any(n.metadata.name == NODE_PREFIX + "cpu" for n in kubelet.api.list_node().items):
        kubelet.create_node(NODE_PREFIX + "cpu", {})
    start = time.time()
    while not STOP:
        try:
            kubelet.step()
        except Exception as exc:  # keep playing the node; say what went wrong
            body = getattr(exc, "body", None)
            log(
                f"step failed: {type(exc).__name__}: {(body.decode() if isinstance(body, bytes) else body) or str(exc)[:300]}"
            )
        if args.max_seconds and time.time() - start > args.max_seconds:
            break
        time.sleep(args.poll)
    log("kubelet stopped")
    sys.exit(0)


if __name__ == "__main__":
    main()
