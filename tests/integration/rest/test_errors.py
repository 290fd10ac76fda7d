"""Every error path answers with the one body shape and the mapped status."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from appliance.domain import errors
from tests.integration.rest.conftest import SMALL_PARAMS, Rest

MISSING = "wsjob-000000000000"


def _error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "field"}
    assert body["error"]["code"] == code
    assert body["error"]["message"] and "Traceback" not in body["error"]["message"]
    detail: dict[str, Any] = body["error"]
    return detail


def _nested(depth: int) -> dict[str, Any]:
    inner: dict[str, Any] = {"name": "fc_mnist"}
    for _ in range(depth):
        inner = {"a": inner}
    return {"model": inner}


def _submit(rest: Rest, **fields: Any) -> httpx.Response:
    body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2, **fields}
    sent = json.dumps({k: v for k, v in body.items() if v is not None})  # \udcff stays escaped
    return rest.http.post(
        "/api/v1/jobs", content=sent, headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"params": "optimizer: {}\n"}, "invalid_spec", "params"),
        ({"params": "model: [unclosed\n"}, "invalid_spec", "params"),
        ({"params": {"nope": {}}}, "invalid_spec", "params"),
        ({"params": {}}, "invalid_spec", "params"),
        ({"labels": {"bad key!": "v"}}, "invalid_spec", "labels"),
        ({"model_dir": "a\x00b"}, "invalid_spec", "model_dir"),
        # Each of these was a 500: a 4,000-digit hex integer (its error message could not
        # write it out), a lone surrogate, a JSON object that recursed while written as YAML.
        ({"params": "model: {name: 0x" + "f" * 4094 + "}\n"}, "invalid_spec", "params"),
        ({"params": "model: {name: \udcff}\n"}, "invalid_spec", "params"),
        ({"params": _nested(900)}, "invalid_spec", "params"),
        ({"model_dir": "/tmp/\udcff"}, "invalid_spec", "model_dir"),
        ({"model_dir": "/tmp/ok\u202eevil"}, "invalid_spec", "model_dir"),
        ({"num_csx": 5}, "insufficient_capacity", "num_csx"),
    ],
)
def test_invalid_specs_are_422_naming_the_field(
    parked: Rest, fields: dict[str, Any], code: str, field: str
) -> None:
    assert _error(_submit(parked, **fields), 422, code)["field"] == field


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"num_csx": None}, "num_csx"),
        ({"num_csx": "2"}, "num_csx"),
        ({"num_csx": 0}, "num_csx"),
        ({"num_steps": 1.5}, "num_steps"),
        ({"mode": "dance"}, "mode"),
        ({"priority": "p9"}, "priority"),
        ({"labels": {"k": 1}}, "labels.k"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_schema_violations_are_422_naming_the_field(
    parked: Rest, fields: dict[str, Any], field: str
) -> None:
    assert _error(_submit(parked, **fields), 422, "invalid_request")["field"] == field


def test_bodies_that_are_not_json_objects_are_422(parked: Rest) -> None:
    bad_json = parked.http.post(
        "/api/v1/jobs", content=b"{", headers={"content-type": "application/json"}
    )
    malformed = _error(bad_json, 422, "invalid_request")
    assert malformed["field"] == "body" and "not valid JSON" in malformed["message"]
    _error(parked.http.post("/api/v1/jobs", json=[1, 2]), 422, "invalid_request")
    _error(parked.http.post("/api/v1/jobs"), 422, "invalid_request")


@pytest.mark.parametrize(
    ("params", "status", "code", "field"),
    [
        ({"limit": 0}, 422, "invalid_request", "limit"),
        ({"limit": 10_001}, 422, "invalid_request", "limit"),
        ({"phase": "DONE"}, 422, "invalid_request", "phase.0"),
        ({"label": "novalue in x"}, 422, "invalid_spec", "label"),
        ({"label": "a=b,bad key=1"}, 422, "invalid_spec", "label"),
        ({"page_token": "not-a-token"}, 422, "invalid_spec", "page_token"),
    ],
)
def test_bad_list_queries(
    parked: Rest, params: dict[str, Any], status: int, code: str, field: str
) -> None:
    got = _error(parked.http.get("/api/v1/jobs", params=params), status, code)
    assert got["field"] == field


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("POST", "/cancel"), ("GET", "/events"), ("GET", "/events/stream")],
)
def test_unknown_and_malformed_job_ids(parked: Rest, method: str, suffix: str) -> None:
    missing = _error(
        parked.http.request(method, f"/api/v1/jobs/{MISSING}{suffix}"), 404, "not_found"
    )
    assert MISSING in missing["message"]
    malformed = parked.http.request(method, f"/api/v1/jobs/not-a-job{suffix}")
    assert _error(malformed, 422, "invalid_spec")["field"] == "job_id"


def test_stream_resume_header_must_be_a_seq(parked: Rest) -> None:
    job = parked.submit()
    response = parked.http.get(
        f"/api/v1/jobs/{job['id']}/events/stream", headers={b"Last-Event-ID": "²".encode()}
    )
    assert _error(response, 422, "invalid_spec")["field"] == "Last-Event-ID"
    parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")


def test_unknown_routes_and_methods(parked: Rest) -> None:
    _error(parked.http.get("/api/v1/nothing-here"), 404, "not_found")
    _error(parked.http.delete("/api/v1/jobs"), 405, "method_not_allowed")


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (errors.PermissionDenied("only admins may submit p0 jobs", field="priority"), 403,
         "permission_denied"),
        (errors.Conflict("job is finished; its priority is frozen"), 409, "conflict"),
        (errors.Unavailable("the database cannot be reached; retry later"), 503, "unavailable"),
        (errors.ApplianceError("an error of no known kind"), 500, "internal"),
    ],
)  # fmt: skip
def test_every_domain_error_maps_once(
    parked: Rest, monkeypatch: pytest.MonkeyPatch, exc: Exception, status: int, code: str
) -> None:
    async def failing(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(parked.running.coordinator.jobs, "get", failing)
    got = _error(parked.http.get(f"/api/v1/jobs/{MISSING}"), status, code)
    assert got["message"] == str(exc)
    assert got["field"] == getattr(exc, "field", None)


def test_unexpected_errors_are_500_with_a_generic_message(
    parked: Rest, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(parked.running.coordinator.jobs, "get", broken)
    got = _error(parked.http.get(f"/api/v1/jobs/{MISSING}"), 500, "internal")
    assert "secret" not in got["message"] and got["field"] is None
