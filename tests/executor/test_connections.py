"""runtime/kubehttp.py's own HTTP/1.1 connections (round 11: they replaced aiohttp's client but behind a proxy),
against a scripted server that answers each request with the bytes a test gives, in the pieces it gives: the
request's bytes on the wire, answers by Content-Length, chunked (split anywhere), to the end of the connection, and
without a body; keep-alive and its limits; the connection limit; timeouts and cancellations, which close their
connection and free its place; and answers that are not HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from kubernetes import client as k8s

from runtime import kubehttp
from runtime.kubehttp import KubeHttp

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

CLOSE = b"<close>"  # a piece that closes the connection
PAUSE = b"<pause>"  # a piece that waits for Server.go
Answer = list[bytes] | None  # the pieces written one after the other (None: no answer, the connection kept open)


@dataclass
class Server:
    """Answers the n-th request (over all connections) with answers[n](request) or, past them, with OK."""

    answers: list[Callable[[bytes], Answer]] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0  # accepted so far
    open: int = 0  # open now
    most_open: int = 0
    closed_by_client: int = 0
    port: int = 0
    go: asyncio.Event = field(default_factory=asyncio.Event)  # what a PAUSE waits for

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                n = len(self.requests)
                self.requests.append(request)
                pieces = self.answers[n](request) if n < len(self.answers) else [OK]
                if pieces is None:  # hold the request unanswered until the client gives up
                    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                        await reader.readexactly(1)
                    self.closed_by_client += 1
                    return
                for piece in pieces:
                    if piece == CLOSE:
                        return
                    if piece == PAUSE:
                        await self.go.wait()
                        continue
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)  # each piece its own read on the client's side (most of the time)
        finally:
            self.open -= 1
            writer.close()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Server]:
    scripted = Server()
    listening = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
    scripted.port = listening.sockets[0].getsockname()[1]
    try:
        yield scripted
    finally:
        listening.close()


def _client(server: Server, *, base: str = "", token: str | None = None, connections: int = 4,
            timeout: float = 5.0) -> KubeHttp:
    cfg = k8s.Configuration(host=f"http://127.0.0.1:{server.port}{base}")
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    return KubeHttp(cfg, None, connections=connections, request_timeout=timeout, user_agent="kubus/test executor")


def _pool(http: KubeHttp) -> kubehttp.Connections:
    assert http._connections is not None
    return http._connections


async def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_the_request_on_the_wire(server: Server) -> None:
    http = _client(server, base="/gateway/c-1/", token="t0k3n")
    try:
        body = b'{"kind":"Pod"}'
        answer = await http.request("POST", "/api/v1/namespaces/ns/pods", body=body,
                                    headers={"Accept": "application/json", "Content-Type": "application/json"})
        got = await http.request("GET", "/api/v1/namespaces/ns/pods/p", headers={"Accept": "application/json"})
    finally:
        await http.close()
    assert (answer.status, answer.body, got.status) == (200, b"{}", 200)
    host = f"127.0.0.1:{server.port}"
    assert server.requests == [
        b"POST /gateway/c-1/api/v1/namespaces/ns/pods HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
        b"User-Agent: kubus/test executor\r\nAccept: application/json\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer t0k3n\r\nContent-Length: 14\r\n\r\n" + body,
        b"GET /gateway/c-1/api/v1/namespaces/ns/pods/p HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
        b"User-Agent: kubus/test executor\r\nAccept: application/json\r\nAuthorization: Bearer t0k3n\r\n\r\n"]
    assert server.connections == 1  # kept alive


async def test_a_line_break_in_a_header_is_refused_before_anything_is_sent(server: Server) -> None:
    http = _client(server)
    try:
        with pytest.raises(ValueError):
            await http.request("GET", "/api/v1/pods", headers={"Accept": "application/json\r\nX-Evil: 1"})
        with pytest.raises(ValueError):
            await http.request("GET", "/api/v1/pods\nX: y")
    finally:
        await http.close()
    assert server.requests == []


@pytest.mark.parametrize("pieces", [
    [b"HTTP/1.1 201 Created\r\nContent-Length: 11\r\n\r\nhello world"],
    [b"HTTP/1.1 201 Created\r\nContent-", b"Length: 11\r", b"\n\r\nhello", b" wor", b"ld"],
    [b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"],
    [b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", b"lo\r", b"\n6\r\n world\r\n0\r\n",
     b"X-Trailer: 1\r\n", b"\r\n"],
    [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 11\r\n\r\nhello world"],
], ids=["length", "length-in-pieces", "chunked", "chunked-in-pieces-with-a-trailer", "after-100-continue"])
async def test_an_answer_in_any_pieces_is_read_and_the_connection_kept(server: Server, pieces: list[bytes]) -> None:
    server.answers = [lambda _: pieces]
    http = _client(server)
    try:
        answer = await http.request("POST", "/api/v1/namespaces/ns/pods", body=b"{}")
        again = await http.request("GET", "/api/v1/namespaces/ns/pods")
    finally:
        await http.close()
    assert (answer.status, answer.body) == (201, b"hello world")
    assert (again.status, again.body) == (200, b"{}")
    assert server.connections == 1


async def test_every_byte_its_own_read(server: Server) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nRetry-After: 3\r\nRetry-After: 9\r\nTransfer-Encoding: chunked\r\n\r\n" \
              b"3\r\nabc\r\n0\r\n\r\n"
    server.answers = [lambda _: [chunked[i:i + 1] for i in range(len(chunked))]]
    http = _client(server)
    try:
        answer = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert (answer.status, answer.body, answer.retry_after) == (200, b"abc", "3")  # the first, as aiohttp's get


@pytest.mark.parametrize("pieces", [
    [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"],
    [b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"],
    [b"HTTP/1.1 200 OK\r\n\r\no", b"k", CLOSE],  # to the end of the connection
    [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"],  # out of step
], ids=["connection-close", "http-1.0", "to-the-end", "more-than-its-length"])
async def test_an_answer_that_ends_its_connection(server: Server, pieces: list[bytes]) -> None:
    server.answers = [lambda _: pieces]
    http = _client(server)
    try:
        answer = await http.request("GET", "/api/v1/pods")
        again = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert (answer.status, answer.body) == (200, b"ok")
    assert again.status == 200
    assert server.connections == 2


@pytest.mark.parametrize("pieces", [
    [b"HTTP/1.1 204 No Content\r\n\r\n"],
    [b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"],
], ids=["204", "304"])
async def test_an_answer_without_a_body(server: Server, pieces: list[bytes]) -> None:
    server.answers = [lambda _: pieces]
    http = _client(server)
    try:
        answer = await http.request("GET", "/api/v1/pods")
        again = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert (answer.body, again.status, server.connections) == (b"", 200, 1)


@pytest.mark.parametrize("pieces", [
    [CLOSE],
    [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", CLOSE],
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", CLOSE],
    [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n"],
    [b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"],
], ids=["closed", "cut-short", "chunk-cut-short", "not-http", "bad-length", "bad-chunk-size", "chunk-too-long",
        "bad-header"])
async def test_no_answer_is_status_0_and_the_next_request_gets_a_new_connection(server: Server,
                                                                               pieces: list[bytes]) -> None:
    server.answers = [lambda _: pieces]
    http = _client(server)
    try:
        answer = await http.request("GET", "/api/v1/pods")
        again = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert answer.status == 0 and answer.body, answer
    assert (again.status, server.connections) == (200, 2)


async def test_a_timeout_is_status_0_and_closes_its_connection(server: Server) -> None:
    server.answers = [lambda _: None]
    http = _client(server, timeout=0.3)
    try:
        answer = await http.request("GET", "/api/v1/pods")
        await _wait_for(lambda: server.closed_by_client == 1)  # closed, not left to answer later
        again = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert (answer.status, answer.body) == (0, b"TimeoutError: ")
    assert (again.status, server.connections) == (200, 2)


async def test_a_cancelled_request_closes_its_connection_and_frees_its_place(server: Server) -> None:
    server.answers = [lambda _: None]
    http = _client(server, connections=1)
    try:
        held = asyncio.create_task(http.request("GET", "/api/v1/pods"))
        await _wait_for(lambda: len(server.requests) == 1)
        waiting = asyncio.create_task(http.request("GET", "/api/v1/pods/second"))
        await _wait_for(lambda: len(_pool(http)._waiters) == 1)  # the one connection is taken
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        answer = await asyncio.wait_for(waiting, 5)
        await _wait_for(lambda: server.closed_by_client == 1)
    finally:
        await http.close()
    assert (answer.status, server.connections) == (200, 2)


async def test_no_more_connections_than_the_limit_and_every_request_answered(server: Server) -> None:
    server.answers = [lambda _: [PAUSE, OK] for _ in range(12)]
    http = _client(server, connections=3)
    try:
        requests = [asyncio.create_task(http.request("GET", f"/api/v1/pods/{i}")) for i in range(12)]
        await _wait_for(lambda: len(server.requests) == 3 and len(_pool(http)._waiters) == 9)
        server.go.set()
        answers = await asyncio.gather(*requests)
    finally:
        await http.close()
    assert [a.status for a in answers] == [200] * 12
    assert (server.most_open, server.connections) == (3, 3)
    # first come, first served: the requests went out in the order they were made
    assert [r.split(b" ")[1] for r in server.requests] == [f"/api/v1/pods/{i}".encode() for i in range(12)]


async def test_an_idle_connection_is_not_reused_past_the_keepalive(server: Server,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    http = _client(server)
    try:
        await http.request("GET", "/api/v1/pods")
        monkeypatch.setattr(kubehttp, "KEEPALIVE_S", 0.0)
        await http.request("GET", "/api/v1/pods")
        await _wait_for(lambda: server.closed_by_client == 1)
    finally:
        await http.close()
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_used(server: Server) -> None:
    server.answers = [lambda _: [OK, CLOSE]]
    http = _client(server)
    try:
        await http.request("GET", "/api/v1/pods")
        await _wait_for(lambda: not any(c.usable for c in _pool(http)._idle))  # the client saw it end
        again = await http.request("GET", "/api/v1/pods")
    finally:
        await http.close()
    assert (again.status, server.connections) == (200, 2)


async def test_close_closes_the_idle_connections_and_then_the_busy_ones(server: Server) -> None:
    server.answers = [lambda _: [OK], lambda _: [PAUSE, OK]]
    http = _client(server)
    await http.request("GET", "/api/v1/pods")
    busy = asyncio.create_task(http.request("GET", "/api/v1/pods/busy"))  # the idle one is taken again
    await _wait_for(lambda: len(server.requests) == 2)
    other = await http.request("GET", "/api/v1/pods/other")  # a second connection, idle once answered
    assert server.open == 2
    await http.close()
    await _wait_for(lambda: server.open == 1)  # the idle one at once
    server.go.set()
    assert ((await busy).status, other.status) == (200, 200)
    await _wait_for(lambda: server.open == 0)  # the busy one once it was answered


async def test_the_wait_for_a_connection_counts_towards_the_timeout(server: Server) -> None:
    server.answers = [lambda _: [PAUSE, OK]]
    http = _client(server, connections=1, timeout=60)
    try:
        held = asyncio.create_task(http.request("GET", "/api/v1/pods/held"))
        await _wait_for(lambda: len(server.requests) == 1)
        _pool(http)._timeout = 0.3  # the next request's
        waited = await http.request("GET", "/api/v1/pods/waited")  # never got the connection
        server.go.set()
        after = await http.request("GET", "/api/v1/pods/after")
    finally:
        await http.close()
    assert ((await held).status, waited.status, waited.body, after.status) == (200, 0, b"TimeoutError: ", 200)
    assert (len(server.requests), server.connections) == (2, 1)  # the wait sent nothing and closed nothing
