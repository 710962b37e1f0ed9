"""The API server over HTTP/1.1 on the event loop, with the kubeconfig's TLS settings and credentials.

The official client sends every request on a worker thread through urllib3: on two cores its thread hand-offs
and urllib3 took most of the executor's CPU (issue 25: ~46% in urllib3, ~17% handing work to the pool). Here
`connections` keep-alive connections send requests from the loop itself. The official client stays what reads
the kubeconfig (runtime/kubeconfig.py): what it resolved (server, CA, client certificate, token or its refresh
hook, proxy) is what these connections use, so both reach the cluster the same way.

The connections are this module's own (`Connections`: an asyncio protocol per connection, one request on it at
a time), not aiohttp's client: an executor makes one request per pod operation, and aiohttp's request (its
ClientRequest with cookies, auth, redirects, compression and tracing, its payload registry, URL parsing, timer
context and response object) was the largest part of the executor's instructions per pod (round 11:
bench/RESULTS.md), where writing a request's bytes and parsing its answer's head is a small fraction of that. No
Accept-Encoding is sent (aiohttp asked for gzip, which kube-apiserver uses only for answers over 128 KiB, and the
executor reads none that large). Behind an HTTP proxy (the kubeconfig's proxy-url) requests still go through an
aiohttp session, which speaks the proxy's CONNECT.

Credentials are read from the Configuration off the loop, at most once a second: its refresh hook may read a
token file (runtime/kubeconfig.TokenFile, itself re-reading once a minute) or run an exec credential plugin,
which must never block the loop; a token rotates on a scale of minutes, so a second's staleness is harmless.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Final

import aiohttp
import msgspec
import yarl
from kubernetes import client as k8s
from kubernetes.client.rest import is_socks_proxy_url, should_bypass_proxies
from multidict import CIMultiDictProxy

from runtime.running import StartupError

CREDENTIALS_PERIOD_S = 1.0
# an idle connection is closed rather than reused after this long, as aiohttp's client did (its keepalive_timeout):
# below the servers' idle timeouts, so a request seldom meets a connection the server is just closing
KEEPALIVE_S: Final = 15.0
MAX_HEAD: Final = 1 << 16  # the longest answer head (status line and headers) read
TO_THE_END: Final = -1  # an answer's body length: up to the end of the connection (no Content-Length, not chunked)
CHUNKED: Final = -2  # an answer's body length: Transfer-Encoding: chunked


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


class BadAnswer(Exception):
    """What the server sent is not an HTTP/1.x answer this client can read: no answer, as a broken connection."""


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, one request on it at a time: `exchange` writes the request's bytes and
    returns the answer, parsed as it arrives. A connection that closed, timed out, answered out of step or said
    `Connection: close` is no longer `usable`, and its pool drops it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self.usable = True
        self.idle_since = 0.0
        self._answer: asyncio.Future[Answer] | None = None
        self._buffer = bytearray()
        self._reset()

    def _reset(self) -> None:
        self._status = 0  # 0 until the answer's head is read
        self._retry_after: str | None = None
        self._length = TO_THE_END
        self._keep_alive = True
        self._no_body = False  # the answer to a HEAD
        self._body = bytearray()  # a chunked answer's chunks so far
        self._chunk = -1  # the bytes of the chunk being read; -1: a chunk's size line comes next
        self._trailers = False  # the last chunk read: trailer lines until an empty one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as aiohttp's: a request is one write

    async def exchange(self, request: bytes, no_body: bool) -> Answer:
        if not self.usable or self._transport is None or self._transport.is_closing():
            self.usable = False
            raise ConnectionResetError("the connection closed while it was idle")
        self._reset()
        self._no_body = no_body
        answer: asyncio.Future[Answer] = self._loop.create_future()
        self._answer = answer
        self._transport.write(request)
        return await answer

    def abort(self, error: BaseException | None = None) -> None:
        """Closes the connection at once; the request in flight, if any, fails with `error`."""
        self.usable = False
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error or ConnectionResetError("the connection was closed"))
        if self._transport is not None:
            self._transport.abort()

    def expire(self) -> None:
        self.abort(TimeoutError())

    def data_received(self, data: bytes) -> None:
        if self._answer is None:  # nothing asked: the server is out of step with this client
            self.abort()
            return
        self._buffer += data
        try:
            self._parse()
        except BadAnswer as exc:
            self.abort(exc)

    def eof_received(self) -> bool:
        if self._answer is not None and self._status and self._length == TO_THE_END:
            self._finish(bytes(self._buffer))  # the body ran to the end of the connection
        self.abort(ConnectionResetError("the server closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort(exc or ConnectionResetError("the server closed the connection"))

    def _parse(self) -> None:
        buffer = self._buffer
        while not self._status:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    raise BadAnswer(f"an answer's head longer than {MAX_HEAD} bytes")
                return
            head = bytes(buffer[:end])
            del buffer[:end + 4]
            self._read_head(head)
        if self._length >= 0:
            if len(buffer) >= self._length:
                body = bytes(buffer[:self._length])
                del buffer[:self._length]
                self._finish(body)
        elif self._length == CHUNKED:
            self._read_chunks()

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
        status = int(code)
        if status < 200:  # an informational answer (100 Continue): the answer follows it
            return
        length = TO_THE_END
        chunked = False
        keep_alive = version == b"HTTP/1.1"
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise BadAnswer(f"not a header line: {line[:100]!r}")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise BadAnswer(f"Content-Length {value[:100]!r}") from None
                if length < 0:
                    raise BadAnswer(f"Content-Length {length}")
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                option = value.strip().lower()
                keep_alive = option == b"keep-alive" or (keep_alive and option != b"close")
            elif name == b"retry-after" and self._retry_after is None:
                self._retry_after = value.strip().decode("latin-1")
        self._status = status
        if self._no_body or status in (204, 304):
            self._length = 0
        else:
            self._length = CHUNKED if chunked else length
        self._keep_alive = keep_alive and self._length != TO_THE_END

    def _read_chunks(self) -> None:
        buffer = self._buffer
        pos = 0
        while True:
            if self._chunk < 0:  # a size line, or a trailer line after the last chunk
                end = buffer.find(b"\r\n", pos)
                if end < 0:
                    if len(buffer) - pos > MAX_HEAD:
                        raise BadAnswer(f"a chunk size or trailer line longer than {MAX_HEAD} bytes")
                    break
                line = bytes(buffer[pos:end])
                pos = end + 2
                if self._trailers:
                    if not line:
                        del buffer[:pos]
                        self._finish(bytes(self._body))
                        return
                    continue
                try:
                    self._chunk = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise BadAnswer(f"not a chunk size: {line[:100]!r}") from None
                if self._chunk == 0:
                    self._chunk, self._trailers = -1, True
            else:
                if len(buffer) - pos < self._chunk + 2:
                    break
                end = pos + self._chunk
                if buffer[end:end + 2] != b"\r\n":
                    raise BadAnswer("a chunk not followed by CRLF")
                self._body += buffer[pos:end]
                pos, self._chunk = end + 2, -1
        del buffer[:pos]

    def _finish(self, body: bytes) -> None:
        answer, self._answer = self._answer, None
        if not self._keep_alive or self._buffer:  # closing, or more sent than the answer: out of step
            self.usable = False
            if self._transport is not None:
                self._transport.close()
        if answer is not None and not answer.done():
            answer.set_result(Answer(self._status, body, self._retry_after))


class Connections:
    """Up to `limit` keep-alive connections to one server (plain or TLS), a request on each at a time; a request
    finding none free waits for one, first come first served. Each request, its wait for a connection included,
    has `timeout` seconds; past them it raises TimeoutError and its connection is closed."""

    def __init__(self, url: yarl.URL, context: ssl.SSLContext | None, server_hostname: str | None, *, limit: int,
                 timeout: float):
        assert url.raw_host is not None and url.port is not None
        self.host, self.port = url.raw_host, url.port
        self._ssl = context
        self._server_hostname = server_hostname if context is not None else None
        self._limit = limit
        self._timeout = timeout
        self._idle: list[_Connection] = []
        self._open = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._closed = False

    async def request(self, request: bytes, no_body: bool = False) -> Answer:
        """The answer to `request` (its bytes, head and body); raises OSError (no connection, or it broke),
        TimeoutError and BadAnswer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        connection = self._idle_connection(loop.time())
        if connection is None:
            connection = await self._acquire(loop, deadline)
        timer = loop.call_at(deadline, connection.expire)
        try:
            return await connection.exchange(request, no_body)
        except BaseException:  # a cancelled request leaves its connection out of step: it is closed
            connection.abort()
            raise
        finally:
            timer.cancel()
            self._release(connection, loop.time())

    async def close(self) -> None:
        """Closes the idle connections now, and the others as their requests end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.abort()
        self._open -= len(idle)

    def _idle_connection(self, now: float) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable and now - connection.idle_since < KEEPALIVE_S:
                return connection
            connection.abort()
            self._open -= 1
        return None

    async def _acquire(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Connection:
        while True:
            connection = self._idle_connection(loop.time())
            if connection is not None:
                return connection
            if self._open < self._limit:
                self._open += 1
                try:
                    async with asyncio.timeout_at(deadline):
                        _, connection = await loop.create_connection(
                            lambda: _Connection(loop), self.host, self.port, ssl=self._ssl,
                            server_hostname=self._server_hostname)
                    return connection
                except BaseException:
                    self._open -= 1
                    self._pass_on_slot()
                    raise
            waiter: asyncio.Future[_Connection | None] = loop.create_future()
            self._waiters.append(waiter)
            # a timer rather than asyncio.timeout_at: with more requests than connections (a slow-start batch of
            # 32 creates on 16), most requests wait here, and a Timeout context costs several times a TimerHandle
            timer = loop.call_at(deadline, _time_out, waiter)
            try:
                handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:  # handed over as
                    # this request was cancelled
                    got = waiter.result()
                    if got is not None:
                        self._release(got, loop.time())
                    else:
                        self._pass_on_slot()
                raise
            finally:
                timer.cancel()
            if handed is not None:
                return handed
            # None: a connection closed, so one may be opened

    def _release(self, connection: _Connection, now: float) -> None:
        if connection.usable and not self._closed:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(connection)
                    return
            connection.idle_since = now
            self._idle.append(connection)
            return
        connection.abort()
        self._open -= 1
        self._pass_on_slot()

    def _pass_on_slot(self) -> None:
        """A connection fewer: the first request waiting may open one."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def _time_out(waiter: asyncio.Future[_Connection | None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class KubeHttp:
    """Connections to the API server of `cfg` (an aiohttp session behind an HTTP proxy). Build it with
    `await KubeHttp.open(...)`."""

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
        self._session: aiohttp.ClientSession | None = None
        self._connections: Connections | None = None
        if self._proxy is not None:
            connector = aiohttp.TCPConnector(limit=connections, ssl=context if context is not None else False,
                                             enable_cleanup_closed=True)
            # no cookies, no retries, no redirects: an API server sends none, and retries are the caller's
            self._session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                                  timeout=aiohttp.ClientTimeout(total=request_timeout),
                                                  skip_auto_headers=("User-Agent",),
                                                  headers={"User-Agent": user_agent})
        else:
            url = yarl.URL(self.host)
            self._connections = Connections(url, context, self._server_hostname, limit=connections,
                                            timeout=request_timeout)
            # every request's first lines: a path prefix of the server's URL (a proxying gateway's) is kept, as
            # aiohttp joined the two; the port is named when it is not the scheme's, as aiohttp's Host header did
            self._base = url.raw_path.rstrip("/")
            self._fixed_head = f"Host: {url.host_port_subcomponent}\r\nUser-Agent: {user_agent}\r\n"
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
        if self._session is not None:
            await self._session.close()
        if self._connections is not None:
            await self._connections.close()

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Answer:
        """One exchange; an answer of any status is returned, no answer is status 0."""
        if self._clock() - self._read_at >= CREDENTIALS_PERIOD_S:  # else no coroutine to await: most requests
            await self._read_credentials()
        if self._connections is None:
            return await self._through_proxy(method, path, body, headers)
        head = f"{method} {self._base}{path} HTTP/1.1\r\n{self._fixed_head}"
        lines = 4  # the request line, Host, User-Agent, the empty line
        if headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            lines += len(headers)
        if self._authorization is not None:
            head += f"Authorization: {self._authorization}\r\n"
            lines += 1
        if body is not None:
            head += f"Content-Length: {len(body)}\r\n"
            lines += 1
        head += "\r\n"
        if head.count("\n") != lines or head.count("\r") != lines:  # a line break of a path or header's own
            raise ValueError(f"a line break inside the request line or a header of {method} {path!r}")
        request = head.encode("latin-1") if body is None else head.encode("latin-1") + body
        try:
            return await self._connections.request(request, no_body=method == "HEAD")
        except (BadAnswer, TimeoutError, OSError) as exc:
            return Answer(0, f"{type(exc).__name__}: {exc}".encode())

    async def _through_proxy(self, method: str, path: str, body: bytes | None,
                             headers: dict[str, str] | None) -> Answer:
        assert self._session is not None
        sent = dict(headers or {})
        if self._authorization is not None:
            sent["Authorization"] = self._authorization
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
