"""runtime/kubehttp.py against a real TLS server: the kubeconfig's CA, client certificate, token and
insecure-skip-tls-verify reach the wire as the official client's urllib3 pool sent them; no answer is status 0."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml  # type: ignore[import-untyped]
from aiohttp import web

from controlplane import certificates
from runtime.kubeconfig import load_kubeconfig
from runtime.kubehttp import CREDENTIALS_PERIOD_S, KubeHttp, ssl_context
from runtime.ports import free_port

TOKEN = "s3cr3t-token-value"


@dataclass
class Seen:
    requests: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certificates.Pki:
    return certificates.make(tmp_path_factory.mktemp("pki"), "10.0.0.1")


@pytest_asyncio.fixture
async def server(pki: certificates.Pki) -> AsyncIterator[tuple[str, Seen]]:
    """An HTTPS server with kube-apiserver's serving certificate that asks for (but does not require) a client
    certificate signed by the CA, as kube-apiserver does, and records what each request carried."""
    seen = Seen()

    async def handle(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in peer["subject"]) if peer else {}
        seen.requests.append({"method": request.method, "path": request.path, "body": await request.read(),
                              "authorization": request.headers.get("Authorization"),
                              "user_agent": request.headers.get("User-Agent"),
                              "content_type": request.headers.get("Content-Type"),
                              "client_cn": subject.get("commonName")})
        if request.path.endswith("/throttled"):
            return web.Response(status=429, body=b'{"kind":"Status"}', headers={"Retry-After": "2"})
        return web.Response(status=201, body=b'{"kind":"Pod"}', content_type="application/json")

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca.cert))
    context.load_cert_chain(str(pki.apiserver.cert), str(pki.apiserver.key))
    context.verify_mode = ssl.CERT_OPTIONAL
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    yield f"https://localhost:{port}", seen
    await runner.cleanup()


def _kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


async def _open(kubeconfig: str, **overrides: Any) -> KubeHttp:
    cfg = load_kubeconfig(kubeconfig)
    return await KubeHttp.open(cfg, connections=4, request_timeout=5, user_agent="kubus-executor/test", **overrides)


async def test_the_client_certificate_and_the_ca_are_used(server: tuple[str, Seen], pki: certificates.Pki,
                                                          tmp_path: Path) -> None:
    url, seen = server
    http = await _open(_kubeconfig(tmp_path / "kc", url, {"certificate-authority": str(pki.ca.cert)},
                                   {"client-certificate": str(pki.admin.cert), "client-key": str(pki.admin.key)}))
    try:
        answer = await http.request("POST", "/api/v1/namespaces/ns/pods", body=b'{"a":1}',
                                    headers={"Content-Type": "application/json"})
    finally:
        await http.close()
    assert (answer.status, answer.body) == (201, b'{"kind":"Pod"}')
    assert seen.requests == [{"method": "POST", "path": "/api/v1/namespaces/ns/pods", "body": b'{"a":1}',
                              "authorization": None, "user_agent": "kubus-executor/test",
                              "content_type": "application/json", "client_cn": "kubus-admin"}]


async def test_a_token_is_sent_and_read_again_at_most_once_a_second(server: tuple[str, Seen],
                                                                     pki: certificates.Pki, tmp_path: Path) -> None:
    url, seen = server
    cfg = load_kubeconfig(_kubeconfig(tmp_path / "kc", url, {"certificate-authority": str(pki.ca.cert)},
                                      {"token": TOKEN}))
    refreshed: list[int] = []

    def refresh(c: Any) -> None:  # what runtime/kubeconfig.TokenFile or an exec plugin's hook is to the client
        refreshed.append(1)
        c.api_key["BearerToken"] = f"Bearer rotated-{len(refreshed)}"

    cfg.refresh_api_key_hook = refresh
    now = [100.0]
    http = KubeHttp(cfg, ssl_context(cfg), connections=2, request_timeout=5, user_agent="t", clock=lambda: now[0])
    try:
        for _ in range(3):
            assert (await http.request("GET", "/api/v1/pods")).status == 201
        now[0] += CREDENTIALS_PERIOD_S
        assert (await http.request("GET", "/api/v1/pods")).status == 201
    finally:
        await http.close()
    assert [r["authorization"] for r in seen.requests] == ["Bearer rotated-1"] * 3 + ["Bearer rotated-2"]
    assert [r["client_cn"] for r in seen.requests] == [None] * 4


async def test_a_server_the_ca_did_not_sign_is_no_answer_and_the_token_is_not_in_it(
        server: tuple[str, Seen], tmp_path: Path) -> None:
    url, seen = server
    other = certificates.make(tmp_path / "other", "10.0.0.1")
    http = await _open(_kubeconfig(tmp_path / "kc", url, {"certificate-authority": str(other.ca.cert)},
                                   {"token": TOKEN}))
    try:
        answer = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert answer.status == 0 and b"certificate verify failed" in answer.body, answer
    assert TOKEN.encode() not in answer.body
    assert seen.requests == []


async def test_insecure_skip_tls_verify_skips_it(server: tuple[str, Seen], tmp_path: Path) -> None:
    url, seen = server
    http = await _open(_kubeconfig(tmp_path / "kc", url, {"insecure-skip-tls-verify": True}, {"token": TOKEN}))
    try:
        answer = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert answer.status == 201
    assert seen.requests[0]["authorization"] == f"Bearer {TOKEN}"


async def test_retry_after_is_passed_on(server: tuple[str, Seen], pki: certificates.Pki, tmp_path: Path) -> None:
    url, _ = server
    http = await _open(_kubeconfig(tmp_path / "kc", url, {"certificate-authority": str(pki.ca.cert)},
                                   {"token": TOKEN}))
    try:
        answer = await http.request("POST", "/api/v1/throttled", body=b"{}")
    finally:
        await http.close()
    assert (answer.status, answer.retry_after) == (429, "2")


async def test_a_refused_connection_is_no_answer(tmp_path: Path) -> None:
    http = await _open(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}", {}, {"token": TOKEN}))
    try:
        answer = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert answer.status == 0 and b"Connect" in answer.body, answer


async def test_a_client_key_that_cannot_be_read_is_a_start_up_error(pki: certificates.Pki, tmp_path: Path) -> None:
    from runtime.running import StartupError

    cfg = load_kubeconfig(_kubeconfig(tmp_path / "kc", "https://localhost:1", {"certificate-authority":
                                      str(pki.ca.cert)}, {"client-certificate": str(pki.admin.cert),
                                                          "client-key": str(pki.kwok.key)}))
    with pytest.raises(StartupError, match="cannot use the kubeconfig's TLS settings for https://localhost:1"):
        await KubeHttp.open(cfg, connections=1, request_timeout=1, user_agent="t")
