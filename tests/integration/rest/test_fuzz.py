"""Fuzz the live REST API from its own OpenAPI document (schemathesis): no input may get a 5xx,
and every response must match the schema the API publishes."""

from __future__ import annotations

import re
from typing import Any

import hypothesis
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi import checks

from tests.fuzz_report import report
from tests.hostile_params import HOSTILE_PARAMS
from tests.integration.rest.conftest import Rest

# Per operation and generation mode: every operation still gets positive and (where it takes
# input) negative cases, about 1,100 in all. The cases are derandomized, so every run repeats
# the same ones, and hypothesis tries its simplest values (empty, zero, absent) among the first
# of each pair; the explicit phase (the schema's own examples) is not counted in this number.
# A case costs about 20 ms, evenly over the operations: 50 a pair took 65 s of CI, 25 half.
EXAMPLES_PER_OPERATION = 25
HOSTILE_EXAMPLES = 100  # the hostile params: one strategy, so they keep their own count
CHECKS = [not_a_server_error, checks.response_schema_conformance, checks.content_type_conformance]


def test_no_generated_request_gets_a_server_error(parked: Rest) -> None:
    schema = schemathesis.openapi.from_url(f"{parked.base_url}/openapi.json")
    tried: dict[str, int] = {}
    operations: list[Any] = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 8

    for operation in operations:
        for mode in GenerationMode:
            if mode is GenerationMode.NEGATIVE and not _has_inputs(operation.label):
                continue
            tried[f"{operation.label} [{mode.value}]"] = _fuzz(operation, mode, parked.base_url)

    total = sum(tried.values())
    report(f"REST fuzz (schemathesis): {total} cases over {len(tried)} operation/mode pairs")
    for label, count in sorted(tried.items()):
        report(f"  {count:4d}  {label}")
    assert total >= len(operations) * 10


def _fuzz(operation: Any, mode: GenerationMode, base_url: str) -> int:
    """Run generated cases of one operation against the live server; returns how many."""
    count = 0

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        nonlocal count
        count += 1
        response = case.call(base_url=base_url, timeout=10)
        case.validate_response(response, checks=CHECKS)
        if "application/json" in str(response.headers.get("content-type")):
            _moments_are_rfc3339(response.json(), f"{case.method} {case.path}")
        if response.status_code in (400, 422):  # a rejected input names what to fix
            error = response.json()["error"]
            assert error["field"], f"{case.method} {case.path} {response.request.body!r}: {error}"

    check()
    return count


MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
MOMENT_KEYS = re.compile(r".*_at|time|since")


def _moments_are_rfc3339(body: Any, where: str) -> None:
    """Every moment a response gives is RFC 3339 in UTC, or null: never Unix seconds."""
    if isinstance(body, list):
        for item in body:
            _moments_are_rfc3339(item, where)
    elif isinstance(body, dict):
        for key, value in body.items():
            if MOMENT_KEYS.fullmatch(key) and not isinstance(value, dict | list):
                assert value is None or MOMENT.fullmatch(str(value)), f"{where}: {key}={value!r}"
            else:
                _moments_are_rfc3339(value, where)


def _has_inputs(label: str) -> bool:
    return "{job_id}" in label or label in {
        "POST /api/v1/jobs", "GET /api/v1/jobs", "POST /api/v1/jobs:cancel",
    }  # fmt: skip


def test_hostile_params_get_a_refusal_naming_params(parked: Rest) -> None:
    """Deep, wide, huge and aliased params (one crashed the coordinator) posted as jobs: each
    is refused naming `params` or accepted whole; the server keeps answering."""
    outcomes: dict[int, int] = {}

    @settings(
        max_examples=HOSTILE_EXAMPLES, deadline=None, database=None,
        derandomize=True, suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(params=HOSTILE_PARAMS)
    def post(params: str) -> None:
        body = {"params": params, "num_csx": 1, "num_steps": 2}
        response = parked.http.post("/api/v1/jobs", json=body, timeout=30)
        outcomes[response.status_code] = outcomes.get(response.status_code, 0) + 1
        assert response.status_code in (201, 413, 422), response.text[:300]
        if response.status_code != 201:
            assert response.json()["error"]["field"] == "params", response.text[:300]
        else:
            parked.http.post(f"/api/v1/jobs/{response.json()['id']}/cancel")
        assert parked.http.get("/healthz", timeout=10).status_code == 200

    post()
    total = sum(outcomes.values())
    report(
        f"REST hostile params (hypothesis): {total} cases, by status {sorted(outcomes.items())}"
    )
    assert total >= HOSTILE_EXAMPLES // 2
