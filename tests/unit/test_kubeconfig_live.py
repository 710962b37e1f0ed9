"""A live client sees the rotated token: the official `kubernetes` client, configured in-cluster by the loader,
against an HTTPS server (its certificate the mounted ca.crt) that records every request's Authorization header.
(The sim takes no bearer tokens yet; this is the client side of token rotation on the wire.)"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client

from runtime.kubeconfig import TOKEN_REREAD_S, Sources, load_kubeconfig


class Recorder(BaseHTTPRequestHandler):
    seen: list[str | None]

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[int, Path, list[str | None]]]:
    """An HTTPS server on 127.0.0.1 with a fresh self-signed certificate; its port, the certificate, and the
    Authorization headers it saw."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "ca.crt", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-subj", "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    seen: list[str | None] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], cert, seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_live_client_sends_the_rotated_serviceaccount_token(tmp_path: Path,
                                                              apiserver: tuple[int, Path, list[str | None]]) -> None:
    port, cert, seen = apiserver
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    shutil.copy(cert, sa / "ca.crt")
    (sa / "token").write_text("first\n")
    now = [0.0]
    cfg = load_kubeconfig(None, None, Sources(
        environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)},
        serviceaccount_dir=sa, home=tmp_path, clock=lambda: now[0]))
    api = client.ApiClient(cfg)
    try:
        core = client.CoreV1Api(api)
        core.list_namespace(_preload_content=False).release_conn()
        (sa / "token").write_text("second\n")  # the kubelet rotated it
        core.list_namespace(_preload_content=False).release_conn()  # within the minute: the token it has
        now[0] = TOKEN_REREAD_S
        core.list_namespace(_preload_content=False).release_conn()
    finally:
        api.close()  # type: ignore[no-untyped-call]
    assert seen == ["Bearer first", "Bearer first", "Bearer second"]
