"""The API server over aiohttp, on the event loop, with the kubeconfig's TLS settings and credentials.

The official client sends every request on a worker thread through urllib3: on two cores its thread hand-offs
and urllib3 took most of the executor's CPU (issue 25: ~46% in urllib3, ~17% handing work to the pool). Here
one aiohttp session keeps `connections` connections alive and sends requests from the loop itself. The
official client stays what reads the kubeconfig (runtime/kubeconfig.py): what it resolved (server, CA, client
certificate, token or its refresh hook, proxy) is what this session uses, so both reach the cluster the same way.

Credentials are read from the Configuration off the loop, at most once a second: its refresh hook may read a
token file (runtime/kubeconfig.TokenFile, itself re-reading once a minute) or run an exec credential plugin,
which must never block the loop; a token rotates on a scale of minutes, so a second's staleness is harmless.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

import aiohttp
import msgspec
from kubernetes import client as k8s
from kubernetes.client.rest import is_socks_proxy_url, should_bypass_proxies
from multidict import CIMultiDictProxy

from runtime.running import StartupError

CREDENTIALS_PERIOD_S = 1.0


class Answer(msgspec.Struct, frozen=True, gc=False):
    """An HTTP answer; status 0 is none at all (the connection failed or timed out), `body` then says why. A
    frozen msgspec Struct, built in C, for one is made per request (a frozen dataclass sets each field through
    object.__setattr__ in Python)."""

    status: int
    body: bytes
    retry_after: str | None = None  # the Retry-After header, as sent


def ssl_context(cfg: k8s.Configuration) -> ssl.SSLContext | None:
    """As the official client's urllib3 pool sets up TLS: the kubeconfig's CA (a file or inline data), its client
    certificate and key, `insecure-skip-tls-verify`. None for a plain-http server. Blocking: it reads files."""
    if not cfg.host.startswith("https://"):
        return None
    if cfg.verify_ssl:
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
        if cfg.assert_hostname is False:
            context.check_hostname = False
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return context


def _authorization(cfg: k8s.Configuration) -> str | None:
    """The Authorization header the official client would send now (its refresh hook runs here)."""
    setting = cfg.auth_settings().get("BearerToken")
    return str(setting["value"]) if setting and setting.get("value") else None


class KubeHttp:
    """One aiohttp session to the API server of `cfg`. Build it with `await KubeHttp.open(...)`."""

    def __init__(self, cfg: k8s.Configuration, context: ssl.SSLContext | None, *, connections: int,
                 request_timeout: float, user_agent: str, clock: Callable[[], float] = time.monotonic):
        self.host = cfg.host.rstrip("/")
        self.user_agent = user_agent
        self._cfg = cfg
        self._clock = clock
        self._proxy = None
        self._proxy_headers = None
        if cfg.proxy and not should_bypass_proxies(cfg.host, cfg.no_proxy or ""):
            if is_socks_proxy_url(cfg.proxy):  # type: ignore[no-untyped-call]
                raise StartupError(f"the kubeconfig's proxy-url {cfg.proxy.split('@')[-1]} is a SOCKS proxy, "
                                   "which the executor does not support; use an HTTP(S) proxy")
            self._proxy, self._proxy_headers = cfg.proxy, cfg.proxy_headers
        self._server_hostname = cfg.tls_server_name or (
            cfg.assert_hostname if isinstance(cfg.assert_hostname, str) else None)
        connector = aiohttp.TCPConnector(limit=connections, ssl=context if context is not None else False,
                                         enable_cleanup_closed=True)
        # no cookies, no retries, no redirects: an API server sends none, and retries are the caller's
        self._session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                              timeout=aiohttp.ClientTimeout(total=request_timeout),
                                              skip_auto_headers=("User-Agent",),
                                              headers={"User-Agent": user_agent})
        self._authorization: str | None = None
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, cfg: k8s.Configuration, *, connections: int, request_timeout: float,
                   user_agent: str) -> KubeHttp:
        """Loads the TLS files off the loop; a certificate or key that cannot be used is a StartupError."""
        try:
            context = await asyncio.to_thread(ssl_context, cfg)
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"cannot use the kubeconfig's TLS settings for {cfg.host}: "
                               f"{type(exc).__name__}: {exc.strerror or exc}") from None
        return cls(cfg, context, connections=connections, request_timeout=request_timeout, user_agent=user_agent)

    async def close(self) -> None:
        await self._session.close()

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Answer:
        """One exchange; an answer of any status is returned, no answer is status 0."""
        sent = dict(headers or {})
        if self._clock() - self._read_at >= CREDENTIALS_PERIOD_S:  # else no coroutine to await: most requests
            await self._read_credentials()
        authorization = self._authorization
        if authorization is not None:
            sent["Authorization"] = authorization
        try:
            async with self._session.request(method, self.host + path, data=body, headers=sent,
                                             allow_redirects=False, proxy=self._proxy,
                                             proxy_headers=self._proxy_headers,
                                             server_hostname=self._server_hostname) as resp:
                data = await resp.read()
                return Answer(resp.status, data, _retry_after(resp.headers))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Answer(0, f"{type(exc).__name__}: {exc}".encode())

    async def _read_credentials(self) -> None:
        """Reads the credentials again, unless a request that held the lock first just did."""
        async with self._lock:
            if self._clock() - self._read_at >= CREDENTIALS_PERIOD_S:
                self._authorization = await asyncio.to_thread(_authorization, self._cfg)
                self._read_at = self._clock()


def _retry_after(headers: CIMultiDictProxy[str]) -> str | None:
    return headers.get("Retry-After")
