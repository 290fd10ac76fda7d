"""Each replica pod takes its own certificate from the job's credentials Secret, and only its
own: the Secret holds every replica's under keys of its own, and the pod names its keys one by
one (an envFrom of the whole Secret would hand every pod every replica's key)."""

from __future__ import annotations

import base64
from typing import Any

from appliance.backends.kubernetes import manifests as m
from appliance.domain.job import Replica
from appliance.domain.plan import Role
from appliance.domain.replica_identity import IDENTITY_ENV

JOB = "wsjob-abcdefghijklmn"
TEMPLATE = m.PodTemplate("ml", "appliance:dev", "IfNotPresent", "appliance.ml.svc:50051", 5, 60)
TOKENS = {"APPLIANCE_DATAPLANE_TOKEN": "t0k", "APPLIANCE_REPLICA_TOKEN": "r3p"}


def identity(replica: str) -> dict[str, str]:
    return {name: f"{name} of {replica}" for name in IDENTITY_ENV}


def read_back(data: dict[str, str]) -> dict[str, Any]:
    """The Secret as the API server returns it: base64 data, our ConfigMap as owner."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"ownerReferences": [{"uid": "uid-1"}]}, "data": encoded}


def test_each_pod_takes_its_own_certificate_and_the_jobs_tokens_from_the_secret() -> None:
    data = m.credentials_data(TOKENS, {"cs2-0": identity("cs2-0"), "cs2-1": identity("cs2-1")})
    secret = m.credentials_secret(JOB, "ml", "uid-1", data)
    assert secret["stringData"]["cs2-1.key"] == "APPLIANCE_REPLICA_KEY of cs2-1"
    assert secret["stringData"]["APPLIANCE_DATAPLANE_TOKEN"] == "t0k"

    replica = Replica(JOB, "cs2-1", Role.CS2, 1, "cs2-02")
    held = [*TOKENS, *identity("cs2-1")]
    (c,) = m.replica_pod(JOB, replica, TEMPLATE, "uid-1", 1, held)["spec"]["containers"]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in c["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert {name: ref["key"] for name, ref in refs.items()} == {
        "APPLIANCE_DATAPLANE_TOKEN": "APPLIANCE_DATAPLANE_TOKEN",
        "APPLIANCE_REPLICA_TOKEN": "APPLIANCE_REPLICA_TOKEN",
        "APPLIANCE_REPLICA_CERT": "cs2-1.crt",
        "APPLIANCE_REPLICA_KEY": "cs2-1.key",
        "APPLIANCE_REPLICA_CA": "replica-ca.crt",
    }
    assert {ref["name"] for ref in refs.values()} == {f"{JOB}-credentials"}
    assert "envFrom" not in c
    every = {e.get("value", "") for e in c["env"]}
    assert not any("of cs2" in value for value in every)  # nothing secret in the pod spec


def test_a_secret_of_an_earlier_launch_of_the_attempt_is_the_jobs_own() -> None:
    earlier = m.credentials_data(TOKENS, {"cs2-0": identity("cs2-0")})
    # Certificates are new each launch; the tokens (which only the coordinator derives) are not.
    assert m.is_credentials_secret(read_back(earlier), "uid-1", TOKENS, ["cs2-0"])
    planted = {**earlier, "APPLIANCE_DATAPLANE_TOKEN": "theirs"}
    assert not m.is_credentials_secret(read_back(planted), "uid-1", TOKENS, ["cs2-0"])
    # One without a certificate for a replica the pods would name cannot serve them.
    assert not m.is_credentials_secret(read_back(earlier), "uid-1", TOKENS, ["cs2-0", "cs2-1"])
    assert m.is_credentials_secret(read_back(dict(TOKENS)), "uid-1", TOKENS)
