"""Health, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from tests.integration.rest.conftest import Rest


def test_health_and_readiness(parked: Rest) -> None:
    assert parked.http.get("/healthz").json() == {"status": "ok", "reason": None}
    assert parked.http.get("/readyz").json() == {"status": "ok", "reason": None, "warnings": []}


def test_metrics_count_submits_phases_and_latency(parked: Rest) -> None:
    job = parked.submit()
    parked.http.get(f"/api/v1/jobs/{job['id']}")
    parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")
    response = parked.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = dict(
        line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#")
    )
    assert float(samples['appliance_jobs_submitted_total{door="rest"}']) >= 1
    assert float(samples['appliance_jobs{phase="CANCELLED"}']) >= 1
    assert 'appliance_jobs{phase="RUNNING"}' in samples
    key = (
        'appliance_http_request_duration_seconds_count{method="GET",'
        'route="/api/v1/jobs/{job_id}",status="200"}'
    )
    assert float(samples[key]) >= 1


def test_metrics_read_the_queue_and_the_pool_when_scraped(parked: Rest) -> None:
    job = parked.submit(priority="p1")  # every system is in maintenance: it stays queued
    text = parked.http.get("/metrics").text
    parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(samples['appliance_queued_jobs{priority="P1",queue="default"}']) == 1
    assert float(samples['appliance_nodes{kind="system",state="maintenance"}']) == 4
    assert float(samples['appliance_nodes{kind="system",state="ok"}']) == 0


def test_openapi_documents_every_route_with_typed_models(parked: Rest) -> None:
    doc = parked.http.get("/openapi.json").json()
    assert set(doc["paths"]) >= {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/events",
        "/api/v1/jobs/{job_id}/events/stream",
        "/healthz",
        "/readyz",
        "/metrics",
    }
    schemas = doc["components"]["schemas"]
    assert {"JobOut", "ReplicaOut", "ProgressOut", "EventOut", "JobListOut", "ErrorOut"} <= set(
        schemas
    )
    get_job = doc["paths"]["/api/v1/jobs/{job_id}"]["get"]
    assert get_job["description"].startswith("A job's full status")
    assert get_job["responses"]["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }
    assert "swagger-ui" in parked.http.get("/docs").text.lower()
