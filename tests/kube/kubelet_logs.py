"""The stand-in kubelet's /containerLogs endpoint (tests/kube/kubelet.py), which the API
server's `pods/log` proxy reads: HTTPS with a self-signed certificate, logs from files."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
import urllib.parse
from pathlib import Path
from typing import Any


class LogServer:
    """The kubelet's /containerLogs endpoint, over HTTPS with a self-signed certificate."""

    def __init__(self, log_dir: Path, workdir: Path) -> None:
        cert, key = workdir / "kubelet.crt", workdir / "kubelet.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        log_dir_ = log_dir

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # /containerLogs/{ns}/{pod}/{container}
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                query = urllib.parse.parse_qs(url.query)
                path = log_dir_ / f"{parts[1]}_{parts[2]}.log"
                data = path.read_bytes() if path.exists() else b""
                if "tailLines" in query:
                    lines = data.splitlines(keepends=True)
                    data = b"".join(lines[-int(query["tailLines"][0]) :])
                if "limitBytes" in query:
                    data = data[: int(query["limitBytes"][0])]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
