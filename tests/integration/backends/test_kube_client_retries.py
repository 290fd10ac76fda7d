"""KubeApi's retry ladder against a real HTTP server that answers like an overloaded or failing
API server: 429 with Retry-After and 5xx are retried, other refusals are not, and a server that
keeps failing ends in KubeUnavailable with the reason."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from appliance.backends.kubernetes import KubeApi, KubeError, KubeUnavailable

POD_LIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "7"},
    "items": [],
}


class Script:
    """The statuses the server answers, in order; then 200 with an empty PodList."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.requests = 0
        self.retry_after = ""


@pytest.fixture
def server() -> Iterator[tuple[Script, int]]:
    script = Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            script.requests += 1
            status = script.statuses.pop(0) if script.statuses else 200
            body = POD_LIST if status == 200 else {
                "kind": "Status", "status": "Failure", "code": status,
                "reason": "Forbidden" if status == 403 else "TooManyRequests",
                "message": f"scripted {status}",
            }  # fmt: skip
            data = json.dumps(body).encode()
            self.send_response(status)
            if status == 429 and script.retry_after:
                self.send_header("Retry-After", script.retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield script, httpd.server_address[1]
    httpd.shutdown()


def kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


async def connect(tmp_path: Path, port: int) -> KubeApi:
    return await KubeApi.connect(
        kubeconfig=kubeconfig(tmp_path, port),
        namespace="ns",
        request_timeout=5,
        backoff=(0.01, 0.01, 0.01),
    )


async def test_429_and_5xx_are_retried_then_succeed(
    tmp_path: Path, server: tuple[Script, int]
) -> None:
    script, port = server
    script.statuses = [429, 503, 500]
    script.retry_after = "0"
    api = await connect(tmp_path, port)
    try:
        items, version = await api.list("Pod", "a=b")
    finally:
        await api.close()
    assert (items, version, script.requests) == ([], "7", 4)
    assert api.last_error == ""  # healthy again


async def test_a_refusal_is_not_retried(tmp_path: Path, server: tuple[Script, int]) -> None:
    script, port = server
    script.statuses = [403]
    api = await connect(tmp_path, port)
    try:
        with pytest.raises(KubeError) as refused:
            await api.list("Pod", "a=b")
    finally:
        await api.close()
    assert (refused.value.status, refused.value.message, script.requests) == (
        403, "scripted 403", 1,
    )  # fmt: skip


async def test_a_server_that_keeps_failing_is_unavailable(
    tmp_path: Path, server: tuple[Script, int]
) -> None:
    script, port = server
    script.statuses = [503] * 10
    api = await connect(tmp_path, port)
    try:
        with pytest.raises(KubeUnavailable, match="answered 503"):
            await api.list("Pod", "a=b")
    finally:
        await api.close()
    assert script.requests == 4  # the first try and three retries
    assert "503" in api.last_error
