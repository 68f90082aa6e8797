"""The operator policy through the delivery paths Terraform uses: Pub/Sub push subscriptions (raw push
envelopes, as the emulator pushes them) and storage CloudEvents, through functions-framework."""

from __future__ import annotations

import dataclasses
import json
import time

from functions.core.policy import (
    CANCEL_DIGEST_ATTRIBUTE,
    NIGHTLY_KEY_ATTRIBUTE,
    OPERATOR_KEY_ATTRIBUTE,
    Policy,
    cancel_digest,
)
from functions.core.runs import State
from tests.fakes.http_events import post, storage_event
from tests.integration.test_functions import QUICK, launch_upload, only_record, upload, wait_for, watch, workers

KEY, OPERATOR = "n" * 40, "o" * 40


def with_policy(h, **knobs):
    h.ctx.settings = dataclasses.replace(h.ctx.settings, policy=Policy(nightly_key=KEY, operator_key=OPERATOR, **knobs))


def pushed(pubsub, endpoint, name):
    topic = pubsub.topic(name)
    pubsub.subscribe(topic, push_endpoint=endpoint)
    return topic


def records(h):
    names = [n for n in h.ctx.store.blobs.list("runs/") if not n.startswith("runs/active/")]
    return [h.ctx.store.get(n.removeprefix("runs/").removesuffix(".json")) for n in names]


def test_a_config_breaking_the_policy_is_one_rejected_record_naming_the_rule(controller, functions_server, bucket):
    h = controller
    with_policy(h)
    hostile = {**QUICK, "cluster": {"namespace": "kube-system", "worker_image": "evil.io/x:1", "pip": ["evil==1"]}}
    response = post(
        functions_server["launch"],
        storage_event(bucket, "configs/hostile.json", upload(bucket, "configs/hostile.json", hostile)),
    )
    assert response.status_code == 200
    record = only_record(h)
    assert record.state == State.REJECTED
    assert {e.split(":")[0] for e in record.errors} == {"policy namespaces", "policy images", "policy allow_pip"}
    assert h.kube.names("secrets") == [] and h.kube.names("rayjobs") == []  # nothing reached the cluster


def test_nightly_slot_and_foreign_buckets_through_pubsub_push(controller, functions_server, pubsub, bucket):
    h = controller
    with_policy(h)
    upload(bucket, "configs/nightly.json", QUICK)
    topic = pushed(pubsub, functions_server["launch"], "launch")
    nightly = json.dumps({"config_uri": f"gs://{bucket}/configs/nightly.json", "nightly": True}).encode()
    pubsub.publisher.publish(topic, nightly).result()  # anyone on the topic, without the key
    pubsub.publisher.publish(
        topic, json.dumps({"config_uri": "gs://someone-elses/c.json", "run_name": "steal"}).encode()
    ).result()
    found = wait_for(lambda: len(records(h)) == 2 and records(h))
    reasons = {r.source["kind"]: r for r in found}
    assert reasons["nightly"].state == State.REJECTED and "policy nightly_key" in reasons["nightly"].reason
    assert (
        reasons["message"].state == State.REJECTED
        and "policy buckets: config_uri names bucket 'someone-elses'" in reasons["message"].reason
    )
    pubsub.publisher.publish(topic, nightly, **{NIGHTLY_KEY_ATTRIBUTE: KEY}).result()  # the scheduler
    wait_for(lambda: h.kube.names("rayjobs"))
    [submitted] = [r for r in records(h) if r.state == State.SUBMITTED]
    assert submitted.source["kind"] == "nightly" and submitted.run_id.startswith("nightly-")


def test_cancel_only_with_the_submitters_token_or_an_operators_key_through_pubsub_push(
    controller, functions_server, pubsub, bucket
):
    """A cancel used to be accepted when its `source` equalled the run's source ref, which anyone reading the
    record or listing the configs bucket knows. Now only the token whose digest the launch carried (message
    attribute, or the config object's metadata for an upload) or the operator key cancels."""
    h = controller
    with_policy(h)
    token = "s3cret-token-of-the-submitter"
    launch_topic = pushed(pubsub, functions_server["launch"], "launch")
    message_id = pubsub.publisher.publish(
        launch_topic,
        json.dumps({"config": QUICK, "run_name": "victim"}).encode(),
        **{CANCEL_DIGEST_ATTRIBUTE: cancel_digest(token)},
    ).result()
    [run_id] = wait_for(lambda: h.kube.names("rayjobs"))
    watch_topic = pushed(pubsub, functions_server["watch"], "watch")
    cancel = {"kind": "cancel", "run_id": run_id}
    pubsub.publisher.publish(watch_topic, json.dumps(cancel).encode()).result()  # a stranger
    for guess in (f"pubsub:{message_id}", cancel_digest(token), run_id):  # what the bucket shows
        pubsub.publisher.publish(watch_topic, json.dumps({**cancel, "token": guess, "source": guess}).encode()).result()
    time.sleep(3)
    assert h.ctx.store.get(run_id).state == State.SUBMITTED and not h.ctx.store.get(run_id).cancel_requested
    assert token not in json.dumps(h.ctx.store.get(run_id).model_dump(mode="json"))
    pubsub.publisher.publish(watch_topic, json.dumps({**cancel, "token": token}).encode()).result()
    # settled: its end published, which comes after its nodes are released (CANCELLED is written before that)
    wait_for(lambda: h.ctx.store.get(run_id).state == State.CANCELLED and h.ctx.store.get(run_id).settled)
    assert h.kube.names("rayjobs") == [] and workers(h)["replicas"] == 0


def test_an_uploaders_token_travels_in_the_objects_metadata(controller, functions_server, bucket):
    from functions.adapters.gcs import storage_client

    h = controller
    with_policy(h)
    blob = storage_client().bucket(bucket).blob("configs/mine.json")
    blob.metadata = {CANCEL_DIGEST_ATTRIBUTE: cancel_digest("mine")}
    blob.upload_from_string(json.dumps(QUICK))
    # Eventarc's finalize data is the object resource, its custom metadata included
    post(
        functions_server["launch"], storage_event(bucket, "configs/mine.json", blob.generation, metadata=blob.metadata)
    )
    record = only_record(h)
    assert record.source["cancel_digest"] == cancel_digest("mine")
    watch(functions_server, {"kind": "cancel", "run_id": record.run_id, "source": record.source["ref"]})
    assert not h.ctx.store.get(record.run_id).cancel_requested
    watch(functions_server, {"kind": "cancel", "run_id": record.run_id, "token": "mine"})
    assert h.ctx.store.get(record.run_id).state == State.CANCELLED


def test_an_operator_may_cancel_any_run(controller, functions_server, pubsub, bucket):
    h = controller
    with_policy(h)
    post(functions_server["launch"], storage_event(bucket, "configs/q.json", upload(bucket, "configs/q.json", QUICK)))
    run_id = only_record(h).run_id
    watch_topic = pushed(pubsub, functions_server["watch"], "watch")
    body = json.dumps({"kind": "cancel", "run_id": run_id}).encode()
    pubsub.publisher.publish(watch_topic, body, **{OPERATOR_KEY_ATTRIBUTE: OPERATOR}).result()
    wait_for(lambda: h.ctx.store.get(run_id).state == State.CANCELLED)


def test_another_teams_raycluster_is_never_changed(controller, functions_server, bucket):
    h = controller
    theirs = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "gemma3-tuning", "namespace": "default", "resourceVersion": "1", "labels": {"team": "b"}},
        "spec": {"workerGroupSpecs": [{"groupName": "gpu-group", "replicas": 3, "minReplicas": 3}]},
    }
    h.kube.objects[("rayclusters", "default", "gemma3-tuning")] = theirs
    post(functions_server["launch"], storage_event(bucket, "configs/t.json", upload(bucket, "configs/t.json", QUICK)))
    record = only_record(h)
    assert record.state == State.FAILED and "not managed by raytune" in record.reason
    assert workers(h)["replicas"] == 3 and h.kube.get("rayclusters", "gemma3-tuning")["metadata"]["labels"] == {
        "team": "b"
    }


def test_a_raycluster_from_before_deployment_labels_running_groups_nobody_here_accounts_for_is_left_alone(
    controller, functions_server, bucket
):
    """Issue 39: a RayCluster made by a deployment that predates the deployment label, with a running worker
    group, was adopted and relabelled by the first launch of this release and its running group removed. No
    record of this deployment accounts for its groups: the launch fails naming them, and neither it nor any tick
    (sizing, idle teardown) changes the RayCluster."""
    h = controller
    theirs = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "gemma3-tuning",
            "namespace": "default",
            "resourceVersion": "1",
            "generation": 1,
            "labels": {"app.kubernetes.io/managed-by": "raytune"},
        },
        "spec": {"workerGroupSpecs": [{"groupName": "gpu-group", "replicas": 3, "minReplicas": 3}]},
    }
    h.kube.objects[("rayclusters", "default", "gemma3-tuning")] = json.loads(json.dumps(theirs))
    post(functions_server["launch"], storage_event(bucket, "configs/t.json", upload(bucket, "configs/t.json", QUICK)))
    record = only_record(h)
    assert record.state == State.FAILED, record.reason
    assert "made before deployments were labelled" in record.reason and "gpu-group: 3 worker nodes" in record.reason
    watch(functions_server)
    h.clock.advance(QUICK.get("cluster", {}).get("idle_delete_seconds", 1800) + 1)
    watch(functions_server)
    watch(functions_server)
    assert h.kube.get("rayclusters", "gemma3-tuning") == theirs, "not relabelled, resized, stamped or deleted"


def test_this_deployments_raycluster_from_before_deployment_labels_is_adopted_and_released_exactly(
    controller, functions_server, bucket
):
    """The same deployment's earlier release made the RayCluster (no deployment label) and admitted a run under
    its one shared group: the tick adopts it (labels it) while that run accounts for the group, keeps the
    group's nodes while the run holds them, and releases them when it ends."""
    h = controller
    launch_upload(functions_server, bucket, "configs/old.json", QUICK)
    run = only_record(h)
    cluster = h.kube.objects[("rayclusters", "default", "gemma3-tuning")]
    del cluster["metadata"]["labels"]["raytune.dev/deployment"]
    [group] = cluster["spec"]["workerGroupSpecs"]
    group["groupName"] = "gpu-group"  # the shared group of the release before per-run groups
    del group["template"]["metadata"]["labels"]
    h.kube.set_status("rayjobs", run.run_id, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    watch(functions_server)
    adopted = h.kube.get("rayclusters", "gemma3-tuning")
    assert "raytune.dev/deployment" in adopted["metadata"]["labels"] and workers(h)["groups"] == {"gpu-group": 2}
    h.kube.set_status("rayjobs", run.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    assert h.ctx.store.get(run.run_id).state == State.SUCCEEDED and workers(h)["groups"] == {"gpu-group": 0}


def test_a_queued_record_rewritten_in_the_bucket_is_checked_again_before_it_is_applied(
    controller, functions_server, bucket
):
    """Trainer pods could write the runs bucket, so a queued run's stored config could be rewritten (another
    image, extra pip) before admission, and submission applied it as stored. The policy is checked again at
    every step that applies something (and the trainer can no longer write records: terraform/iam.tf)."""
    h = controller
    with_policy(h)
    launch_upload(functions_server, bucket, "configs/holder.json", {**QUICK, "scaling": {"nodes": 5}})
    launch_upload(functions_server, bucket, "configs/waiter.json", QUICK)
    by_state = {r.state: r for r in h.ctx.store.active()}
    holder, waiter = by_state[State.SUBMITTED], by_state[State.QUEUED]

    def tamper(record):
        config = {**record.config, "cluster": {**record.config["cluster"], "worker_image": "evil.io/miner:1"}}
        return record.model_copy(update={"config": config})

    h.ctx.store.update(waiter.run_id, tamper)
    h.kube.set_status("rayjobs", holder.run_id, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    watch(functions_server)
    record = h.ctx.store.get(waiter.run_id)
    assert record.state == State.FAILED
    assert "breaks the operator policy now: policy images: cluster.worker_image 'evil.io/miner:1'" in record.reason
    assert h.kube.names("rayjobs") == [] and workers(h)["replicas"] == 0  # nothing of it was applied


def test_a_config_asking_for_other_capacity_than_the_operators_is_rejected_not_rewritten(
    controller, functions_server, bucket
):
    """Issue 39: a config naming another reservation or accelerator than the operator's fixed ones was
    SUBMITTED with the operator's values put in; one choosing Spot through a node selector under a kinds-only
    policy ran on Spot. Each is one REJECTED record naming the rule, and nothing reaches the cluster."""
    h = controller
    with_policy(h, reservation="a4-res", accelerator="B200", capacity_kinds=("reservation", "on-demand"))
    asks = {
        "other-reservation": {"reservation": "team-b-res"},
        "other-accelerator": {"accelerator": "H200"},
        "spot-by-selector": {"node_selector": {"cloud.google.com/gke-spot": "true"}},
    }
    for name, scaling in asks.items():
        config = {**QUICK, "scaling": {**QUICK["scaling"], **scaling}}
        event = storage_event(bucket, f"configs/{name}.json", upload(bucket, f"configs/{name}.json", config))
        assert post(functions_server["launch"], event).status_code == 200
    rules = {r.run_id.rsplit("-", 1)[0]: [e.split(":")[0] for e in r.errors] for r in records(h)}
    assert rules == {
        "other-reservation": ["policy reservation"],
        "other-accelerator": ["policy accelerator"],
        "spot-by-selector": ["policy capacity_kinds"],
    }
    assert {r.state for r in records(h)} == {State.REJECTED}
    assert h.kube.names("rayjobs") == [] and h.kube.names("rayclusters") == []


def test_a_config_uri_into_the_controllers_own_prefixes_is_refused_before_it_is_read(controller, bucket):
    """Issue 39: Terraform lists the runs bucket among the buckets config_uri may name, so a message could point
    at another run's record, whose content was then copied into the new run's REJECTED record."""
    from functions.handlers import launch
    from functions.local.cloudevents import message_published, object_finalized

    h = controller
    with_policy(h)
    other = launch.handle(
        object_finalized(bucket, "configs/other.json", upload(bucket, "configs/other.json", QUICK)), h.ctx
    )
    assert other.state == State.SUBMITTED
    for n, target in enumerate((f"runs/{other.run_id}.json", f"checkpoints/{other.run_id}/result.json", "clusters/x")):
        record = launch.handle(message_published({"config_uri": f"gs://{bucket}/{target}"}, f"peek-{n}"), h.ctx)
        assert record.state == State.REJECTED and record.raw_config is None, record  # nothing of it was read
        [error] = record.errors
        assert error.startswith(
            f"config_uri gs://{bucket}/{target} is under {target.split('/')[0]}/ of the runs bucket"
        )
