"""The chart's Prometheus scraping (pod annotations, a ServiceMonitor) and its gRPC readiness
probe: all off by default, each what the coordinator serves when turned on."""

from __future__ import annotations

from typing import Any

import yaml

from tests.deploy.chart import CHART, RELEASE, Helm, Rendered

Obj = dict[str, Any]


def _objects(helm: Helm, *args: str) -> list[Obj]:
    return [o for o in yaml.safe_load_all(helm.template(*args)) if o]


def _coordinator(objects: list[Obj]) -> Obj:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod: Obj = deployment["spec"]["template"]
    return pod


def test_scraping_and_the_grpc_probe_are_off_by_default(rendered: dict[str, Rendered]) -> None:
    for name, r in rendered.items():
        assert not [o for o in r.objects if o["kind"] == "ServiceMonitor"]
        pod = _coordinator(r.objects)
        probe = pod["spec"]["containers"][0]["readinessProbe"]
        assert probe["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTPS"}
        if name == "default":  # the other values set podAnnotations of their own
            assert not any(k.startswith("prometheus.io/") for k in pod["metadata"]["annotations"])


def test_pod_annotations_win_over_the_scrape_annotations(helm: Helm) -> None:
    pod = _coordinator(
        _objects(
            helm, "--set", "metrics.scrapeAnnotations=true",
            "--set-string", "podAnnotations.prometheus\\.io/port=9999",
        )
    )  # fmt: skip
    annotations = pod["metadata"]["annotations"]
    assert (annotations["prometheus.io/port"], annotations["prometheus.io/scrape"]) == (
        "9999", "true",
    )  # fmt: skip


def test_scrape_annotations_name_the_metrics_port(helm: Helm) -> None:
    pod = _coordinator(_objects(helm, "--set", "metrics.scrapeAnnotations=true"))
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert annotations["prometheus.io/port"] == str(ports["http"])


def test_a_service_monitor_scrapes_the_service_http_port(helm: Helm) -> None:
    objects = _objects(
        helm, "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.labels.release=prometheus",
    )  # fmt: skip
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (service,) = [o for o in objects if o["kind"] == "Service"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")


def test_a_grpc_readiness_probe_is_refused_saying_why(helm: Helm) -> None:
    """The kubelet's gRPC probe speaks no TLS, and every door serves TLS only."""
    done = helm.run("template", RELEASE, str(CHART), "--set", "readinessProbe=grpc")
    assert done.returncode != 0
    assert "the kubelet's gRPC probe speaks no TLS" in done.stderr, done.stderr


def test_bad_metrics_values_are_refused(helm: Helm) -> None:
    for args, message in [
        (["--set", "readinessProbe=tcp"], "/readinessProbe"),
        (["--set", "metrics.serviceMonitor.interval=often"], "/metrics/serviceMonitor/interval"),
        (["--set", "metrics.scrape=true"], "'scrape' not allowed"),
    ]:
        done = helm.run("template", RELEASE, str(CHART), *args)
        assert done.returncode != 0 and message in done.stderr, done.stderr
