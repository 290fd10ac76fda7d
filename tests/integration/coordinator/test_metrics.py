"""/metrics of a live coordinator after real jobs ran through both doors (the Python client over
gRPC, and REST): every door counted once, the exposition checked by promtool, and the Grafana
dashboard's queries parsed by promtool and naming only metrics the coordinator exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from appliance.client import ApplianceClient
from appliance.domain.errors import NotFound
from appliance.domain.phases import Phase
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.promtool import REPO, find_promtool, promtool

PARAMS = REPO / "examples" / "params_fc_mnist.yaml"
SMALL_PARAMS = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
DASHBOARD = REPO / "deploy" / "grafana" / "appliance.json"
# Grafana's own variables, as a Prometheus query would have them filled in.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}
GRPC_JOBS, REST_JOBS = 2, 1

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Scrape:
    def __init__(self, text: str, phases: dict[str, Phase]) -> None:
        self.text = text
        self.phases = phases  # each job's final phase, as the API says
        self.samples: Samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, frozenset(sample.labels.items()))
                self.samples[key] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def total(self, name: str, **labels: str) -> float:
        """The sum over every series of `name` that has these labels."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)

    @property
    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    """Jobs submitted through the client (gRPC) and REST, run to their end; one call that
    fails (NOT_FOUND), /docs and a path no route has; then one scrape."""
    data_dir = tmp_path_factory.mktemp("metrics") / "data"
    with serving(data_dir) as running, ApplianceClient(running.address) as client:
        http = httpx.Client(base_url=f"https://127.0.0.1:{running.coordinator.http_port}")
        handles = [
            client.submit(params=PARAMS, num_csx=1, num_steps=2, detach=True)
            for _ in range(GRPC_JOBS)
        ]
        ids = [job.id for job in handles]
        for _ in range(REST_JOBS):
            body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2}
            response = http.post("/api/v1/jobs", json=body)
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
        phases = {job_id: client.job(job_id).wait(timeout=90).phase for job_id in ids}
        with pytest.raises(NotFound):
            client.get_job("wsjob-000000000000000")
        assert http.get("/docs").status_code == 200
        assert http.get("/no/such/route").status_code == 404
        text = http.get("/metrics").text
        http.close()
    yield Scrape(text, phases)


def scrape_of(running: RunningCoordinator, phases: dict[str, Phase]) -> Scrape:
    url = f"https://127.0.0.1:{running.coordinator.http_port}/metrics"
    return Scrape(httpx.get(url, timeout=30).text, phases)


SIM = {"backend": "sim", "sim_step_seconds": 0.0, "restart_backoff_seconds": 0.0}
SIM_PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [8]},
    "runconfig": {"checkpoint_steps": 100},
}


def test_a_replica_failure_and_its_restart_are_counted(tmp_path: Path) -> None:
    with (
        serving(tmp_path / "data", **SIM, sim_fail_at="cs2-0@250") as running,
        ApplianceClient(running.address, detach=True) as client,
    ):
        job = client.submit(params=SIM_PARAMS, num_csx=1, num_steps=400, max_restarts=1)
        final = job.wait(timeout=30)
        assert (final.phase, final.restarts) == (Phase.SUCCEEDED, 1)
        scrape = scrape_of(running, {job.id: final.phase})
    assert scrape.value("appliance_replica_failures_total", role="cs2") == 1
    assert scrape.total("appliance_replica_failures_total") == 1
    assert scrape.value("appliance_job_requeues_total", cause="restart") == 1
    assert scrape.value("appliance_job_requeues_total", cause="preemption") == 0
    assert scrape.value("appliance_job_time_to_running_seconds_count") == 2  # each attempt
    assert scrape.value("appliance_jobs_finished_total", phase="SUCCEEDED") == 1


def test_a_preemption_is_counted(tmp_path: Path) -> None:
    with (
        serving(tmp_path / "data", **SIM) as running,
        ApplianceClient(running.address, detach=True) as client,
    ):
        victim = client.submit(
            params=SIM_PARAMS, num_csx=4, num_steps=10**6, priority="p3",
            labels={SIM_STEP_SECONDS_LABEL: "0.004"},
        )  # fmt: skip
        wait_until(lambda: victim.status.progress.step >= 1, 30, "the P3 job to train")
        urgent = client.submit(params=SIM_PARAMS, num_csx=2, num_steps=10, priority="p1")
        assert urgent.wait(timeout=30).phase is Phase.SUCCEEDED
        victim.cancel()
        scrape = scrape_of(running, {})
    assert scrape.value("appliance_scheduler_decisions_total", decision="preempt") == 1
    assert scrape.value("appliance_job_requeues_total", cause="preemption") == 1
    assert scrape.value("appliance_job_requeues_total", cause="restart") == 0
    assert scrape.total("appliance_replica_failures_total") == 0


@pytest.fixture(scope="module")
def promtool_binary() -> Path:
    return find_promtool()


def test_submits_are_counted_by_door(scrape: Scrape) -> None:
    assert scrape.value("appliance_jobs_submitted_total", door="grpc") == GRPC_JOBS
    assert scrape.value("appliance_jobs_submitted_total", door="rest") == REST_JOBS
    assert scrape.value("appliance_jobs_submitted_total", door="internal") == 0
    admitted = scrape.value("appliance_scheduler_decisions_total", decision="admit")
    assert admitted == GRPC_JOBS + REST_JOBS


def test_jobs_are_counted_by_final_phase_and_timed_to_running(scrape: Scrape) -> None:
    for phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED):
        ended = sum(1 for p in scrape.phases.values() if p is phase)
        assert scrape.value("appliance_jobs_finished_total", phase=phase.value) == ended
    assert scrape.value("appliance_jobs", phase="SUCCEEDED") == GRPC_JOBS + REST_JOBS
    ran = GRPC_JOBS + REST_JOBS  # each job ran once: no requeue
    assert scrape.value("appliance_job_time_to_running_seconds_count") == ran
    assert scrape.total("appliance_job_requeues_total") == 0
    assert scrape.value("appliance_scheduler_pass_duration_seconds_count") >= 1


def test_the_queue_and_the_pool_are_read_at_scrape_time(scrape: Scrape) -> None:
    assert scrape.total("appliance_queued_jobs") == 0
    assert scrape.value("appliance_queued_jobs", queue="default", priority="P2") == 0
    assert scrape.value("appliance_nodes", kind="system", state="ok") == 4
    assert scrape.value("appliance_nodes_in_use", kind="system") == 0
    assert scrape.value("appliance_coordinator_serving") == 1


def test_grpc_calls_are_counted_by_method_and_code(scrape: Scrape) -> None:
    cluster = "appliance.v1.ClusterService"
    handled = "grpc_server_handled_total"
    submits = scrape.value(
        handled, grpc_type="unary", grpc_service=cluster, grpc_method="SubmitJob", grpc_code="OK"
    )
    assert submits == GRPC_JOBS
    not_found = scrape.total(handled, grpc_method="GetJob", grpc_code="NOT_FOUND")
    assert not_found == 1
    reports = scrape.total(handled, grpc_service="appliance.v1.ReplicaControl", grpc_code="OK")
    assert reports > 0  # the replicas' calls
    timed = scrape.total("grpc_server_handling_seconds_count", grpc_method="SubmitJob")
    assert timed == GRPC_JOBS


def test_http_requests_are_labelled_by_route_template(scrape: Scrape) -> None:
    latency = "appliance_http_request_duration_seconds_count"
    assert scrape.value(latency, method="POST", route="/api/v1/jobs", status="201") == REST_JOBS
    assert scrape.value(latency, method="GET", route="/docs", status="200") == 1
    assert scrape.value(latency, method="GET", route="unmatched", status="404") == 1
    routes = {dict(labels).get("route") for name, labels in scrape.samples if name == latency}
    assert not any(route and "wsjob-" in route for route in routes)  # templates, not ids


@pytest.mark.timeout(900)  # a first build of promtool takes minutes
def test_exposition_passes_promtool(scrape: Scrape, promtool_binary: Path) -> None:
    done = promtool(promtool_binary, "check", "metrics", stdin=scrape.text)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "", done.stdout  # no lint problem either


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' panels included, with
    Grafana's variables filled in."""
    found = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable, value in GRAFANA_VARIABLES.items():
                    expr = expr.replace(variable, value)
                found.append((panel["title"], expr))

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return found


@pytest.mark.timeout(900)  # a first build of promtool takes minutes
def test_dashboard_queries_parse(tmp_path: Path, promtool_binary: Path) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 10
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{i}", "expr": expr}
                    for i, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = promtool(promtool_binary, "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_names_only_exported_metrics(scrape: Scrape) -> None:
    exported = scrape.names
    for title, expr in dashboard_queries():
        names = set(re.findall(r"\b(?:appliance|grpc_server)_[a-z0-9_]+\b", expr))
        assert names, f"{title}: {expr} names no metric of the coordinator"
        missing = names - exported
        assert not missing, f"{title}: {sorted(missing)} are not in /metrics"
        # Any other word is a function, a keyword or a label, or a metric of someone else's.
        stripped = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^]]*\]', "", expr)
        others = set(re.findall(r"\b[a-z_:][a-z0-9_:]*\b", stripped)) - names
        assert others <= PROMQL_WORDS, f"{title}: {sorted(others - PROMQL_WORDS)}"


# The PromQL functions and keywords the dashboard uses, and its labels: a query with any other
# word fails until it is added here (it may be a metric the coordinator does not export).
PROMQL_WORDS = {"sum", "rate", "histogram_quantile", "by", "le"}
PROMQL_WORDS |= {"queue", "priority", "phase", "door", "decision", "kind", "state", "cause"}
PROMQL_WORDS |= {"role", "grpc_service", "grpc_method", "grpc_code", "method", "route", "status"}
