"""Hostile input through real HTTP deliveries: permanent trouble is answered once (a REJECTED record or an
`ignored` line, and a 2xx), a corrupt record is quarantined, and the token never leaks."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.core.runs import State
from tests.fakes.http_events import PUBSUB, post, pubsub_event, storage_event
from tests.harness import HF_TOKEN
from tests.integration.test_functions import QUICK, only_record, upload, watch


def test_one_invalid_config_delivered_50_times_is_one_event(controller, functions_server, bucket):
    generation = upload(bucket, "configs/bad.json", b"{not json")
    event = storage_event(bucket, "configs/bad.json", generation, size=9)
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda _: post(functions_server["launch"], event).status_code, range(50)))
    assert codes == [200] * 50
    assert only_record(controller).state == State.REJECTED
    events = controller.finished_events()
    assert [e["state"] for e in events] == ["REJECTED"], events


def test_a_corrupt_record_is_quarantined_and_the_tick_goes_on(controller, functions_server, bucket):
    h = controller
    post(functions_server["launch"], storage_event(bucket, "configs/ok.json", upload(bucket, "configs/ok.json", QUICK)))
    good = only_record(h)
    h.ctx.store.mark_active("broken-0123456789")
    upload(bucket, "runs/broken-0123456789.json", b'{"run_id": "broken", "state": "NOPE"')
    h.kube.set_status("rayjobs", good.run_id, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    watch(functions_server)
    assert h.ctx.store.get(good.run_id).state == State.RUNNING
    assert h.ctx.store.blobs.list("quarantine/runs/") == ["quarantine/runs/broken-0123456789.json"]
    assert "runs/active/broken-0123456789" not in h.ctx.store.blobs.list("runs/active/")
    [event] = [e for e in h.finished_events() if e["state"] == "QUARANTINED"]
    assert event["run_id"] == "broken-0123456789"
    watch(functions_server)  # reported once
    assert len([e for e in h.finished_events() if e["state"] == "QUARANTINED"]) == 1


def test_an_api_error_quoting_the_token_is_scrubbed_everywhere(controller, functions_server, bucket, capfd):
    from functions.handlers import logs

    logs.setup()
    h = controller
    h.kube.fail("PATCH", "/rayjobs/", 422, times=1, message=f"spec.entrypoint: invalid value {HF_TOKEN}")
    # A handler added after set-up, as functions-framework adds one with LOG_EXECUTION_ID=true.
    late = logging.StreamHandler()
    logging.getLogger().addHandler(late)
    try:
        post(
            functions_server["launch"], storage_event(bucket, "configs/q.json", upload(bucket, "configs/q.json", QUICK))
        )
    finally:
        logging.getLogger().removeHandler(late)
    record = only_record(h)
    assert record.state == State.FAILED and "[REDACTED]" in record.reason
    assert HF_TOKEN not in json.dumps(record.model_dump(mode="json"))
    assert all(HF_TOKEN not in json.dumps(e) for e in h.finished_events())
    out, err = capfd.readouterr()
    assert "invalid value" in out + err and HF_TOKEN not in out + err


ENVELOPE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=30),
    st.just("2026-12-02T10:00:00"),
    st.just("not-a-time"),
    st.just("12abc"),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.fixed_dictionaries(
        {},
        optional={
            "bucket": ENVELOPE_VALUES,
            "name": st.one_of(ENVELOPE_VALUES, st.just("configs/x.json")),
            "generation": ENVELOPE_VALUES,
            "size": ENVELOPE_VALUES,
            "timeCreated": ENVELOPE_VALUES,
        },
    )
)
def test_no_storage_envelope_gets_a_5xx(controller, functions_server, bucket, data):
    headers, _ = storage_event(bucket, "configs/x.json", 1)
    response = post(functions_server["launch"], (headers, json.dumps(data).encode()))
    assert response.status_code < 500, (data, response.text[-500:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries(
            {},
            optional={
                "config": ENVELOPE_VALUES,
                "config_uri": st.one_of(
                    ENVELOPE_VALUES, st.just("gs:///x"), st.just("gs://-bad-/x"), st.just("gs://b-1/x#frag")
                ),
                "run_name": ENVELOPE_VALUES,
                "nightly": ENVELOPE_VALUES,
                "kind": st.sampled_from(["tick", "cancel", "x"]),
                "run_id": ENVELOPE_VALUES,
            },
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_no_pubsub_push_body_gets_a_5xx(controller, functions_server, body):
    """And a launch message, whose run id its message id always gives, gets a record whatever its body; a
    nightly one takes the day's record (one run per UTC day), which an earlier example may hold already."""
    from cloudevents.http import CloudEvent

    from functions.core import events

    launch_id, when = uuid.uuid4().hex, controller.clock()
    for target, message_id in (("launch", launch_id), ("watch", None)):
        response = post(functions_server[target], pubsub_event(body, message_id=message_id, when=when))
        assert response.status_code < 500, (target, body, response.text[-500:])
    blobs = controller.ctx.store.blobs
    records = [
        json.loads(blobs.read(name)[0])
        for name in blobs.list("runs/")
        if name.endswith(".json") and name.count("/") == 1
    ]
    message = {"data": base64.b64encode(body).decode(), "messageId": launch_id, "publishTime": when.isoformat()}
    event = CloudEvent(
        {"type": PUBSUB, "source": "//pubsub.googleapis.com/projects/p/topics/launch"}, {"message": message}
    )
    try:
        nightly = events.launch_request(event).source["kind"] == "nightly"  # as the launch function parsed it
    except events.Ignored:
        nightly = False
    if nightly:
        assert events.launch_request(event).run_id in {r["run_id"] for r in records}, body
    else:
        assert f"pubsub:{launch_id}" in {r["source"]["ref"] for r in records}, body


def test_raw_envelope_oddities_are_answered(controller, functions_server, bucket):
    headers, _ = pubsub_event({})
    for raw in (
        b"[" * 10_000 + b"]" * 10_000,
        b'{"message": "x"}',
        b'{"message": {"messageId": {}}}',
        json.dumps(
            {"message": {"messageId": "1", "data": base64.b64encode(b'{"config": 1' + b"9" * 5000 + b"}").decode()}}
        ).encode(),
    ):
        assert post(functions_server["launch"], (headers, raw)).status_code < 500


def test_a_broken_launch_envelope_is_kept_and_logged_not_dropped(controller, functions_server, bucket, caplog):
    """Issue 39: a storage event whose body is not JSON, or whose name is not a string, got 200 and left no
    trace: no run id can be derived, so the launch keeps a copy under quarantine/events/ naming the reason (and
    logs it); an ordinary object that is not a run config is still only ignored."""
    h = controller
    headers, _ = storage_event(bucket, "configs/x.json", 1)
    assert (
        post(functions_server["launch"], (headers, b'{"bucket": "b", "name": 12, "generation": "1"}')).status_code
        == 200
    )
    assert post(functions_server["launch"], (headers, json.dumps(["not", "an", "object"]).encode())).status_code == 200
    assert post(functions_server["launch"], (headers, b"{not json")).status_code == 200
    assert post(functions_server["launch"], storage_event(bucket, "notes/readme.txt", 1)).status_code == 200
    kept = h.ctx.store.blobs.list("quarantine/events/")
    reasons = sorted(json.loads(h.ctx.store.blobs.read(path)[0])["reason"] for path in kept)
    assert (
        reasons[0]
        == "event data is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    assert reasons[1:] == ["event data is not an object", "storage event without a string bucket, name and generation"]
    assert h.ctx.store.blobs.list("runs/") == []  # no run from any of them


def test_a_kept_envelope_keeps_no_key_whatever_its_value(controller, functions_server, bucket):
    """Issue 53: a broken launch envelope is kept with its reason, and the keys its Pub/Sub attributes carry (the
    operator's, the scheduler's; here values this instance does not know: a rotated key, another deployment's)
    are redacted by their names, in a JSON body and in one that is not JSON."""
    h = controller
    secret = "op-4f9c2e71a0b3d58e6c1f"
    attributes = {"raytune-operator-key": secret, "raytune-nightly-key": secret + "n", "team": "crm"}
    headers, _ = pubsub_event({})
    envelope = {"message": {"messageId": {}, "attributes": attributes}, "subscription": "s"}
    assert post(functions_server["launch"], (headers, json.dumps(envelope).encode())).status_code == 200
    broken = ('{"message": {"attributes": {"raytune-operator-key": "' + secret + '", token=' + secret + "x").encode()
    assert post(functions_server["launch"], (headers, broken)).status_code == 200
    kept = [h.ctx.store.blobs.read(path)[0].decode() for path in h.ctx.store.blobs.list("quarantine/events/")]
    assert len(kept) == 2
    assert all(secret not in text for text in kept), kept
    as_json = next(json.loads(json.loads(text)["data"]) for text in kept if '"team' in text)
    assert as_json["message"]["attributes"] == {
        "raytune-operator-key": "[REDACTED]",
        "raytune-nightly-key": "[REDACTED]",
        "team": "crm",
    }
