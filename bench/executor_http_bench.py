"""Instructions per API request of the executor: `KubeApi.call` through runtime/kubehttp.py's aiohttp session, to
a stand-in API server in another process (so that only the executor's side is counted).

    .venv/bin/python -m bench.executor_http_bench 1000 --check   # what the server received and answered, a digest
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.executor_http_bench 1000        # the instructions of the requests alone

N pod creates (POSTs of bench/executor_bench.py's bodies, answered 201 with the body), 16 in flight as the
executor's creates of one slow-start batch are, on a session of 16 connections (the executor's default);
`--in-flight 1` sends them one at a time. The server is started and the session's connections opened before the
counted part. The difference of two sizes is the cost of one request. No count repeats exactly (how many answers
a turn of the loop finds varies from run to run, and when the cyclic GC runs with it): two runs of 1,000 requests
differed by ~0.3% with `--in-flight 1`, so a change of less than ~1% a request needs several runs of each size.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys

import uvloop
from aiohttp import web
from kubernetes import client as k8s

from bench.executor_bench import pod_bodies
from executor.kubeapi import KubeApi
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket
from runtime.kubehttp import KubeHttp

CONNECTIONS = 16
PATH = "/api/v1/namespaces/bench/pods"


def serve() -> None:
    """The stand-in server: answers a POST with 201 and its body; GET /digest says what every request carried
    (method, path, headers but Host, body), hashed, in sorted order (16 requests in flight arrive in any order)."""
    received: list[tuple[str, str, list[tuple[str, str]], bytes]] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.read()
        received.append((request.method, request.path_qs,
                         sorted((k, v) for k, v in request.headers.items() if k != "Host"), body))
        return web.Response(body=body, status=201, content_type="application/json")

    async def digest(request: web.Request) -> web.Response:
        text = f"{len(received)} {hashlib.sha256(repr(sorted(received)).encode()).hexdigest()} {received[-1][2]}"
        return web.Response(text=text)

    async def main() -> None:
        app = web.Application()
        app.router.add_post(PATH, create)
        app.router.add_get("/digest", digest)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    uvloop.run(main())


async def post_all(api: KubeApi, bodies: list[bytes], answers: list[tuple[int, bytes]], in_flight: int) -> None:
    todo = iter(bodies)

    async def worker() -> None:
        for body in todo:
            reply = await api.call("POST", PATH, body=body)
            answers.append((reply.status, reply.data))

    await asyncio.gather(*(worker() for _ in range(in_flight)))


def main() -> None:
    if sys.argv[1] == "--serve":
        serve()
        return
    pods = int(sys.argv[1])
    in_flight = int(sys.argv[sys.argv.index("--in-flight") + 1]) if "--in-flight" in sys.argv else CONNECTIONS
    server = subprocess.Popen([sys.executable, "-m", "bench.executor_http_bench", "--serve"], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        cfg = k8s.Configuration(host=f"http://127.0.0.1:{int(server.stdout.readline())}")
        bodies = [body for _, body in pod_bodies(pods, "rs-uid-1")]
        answers: list[tuple[int, bytes]] = []
        loop = uvloop.new_event_loop()
        http = loop.run_until_complete(KubeHttp.open(cfg, connections=CONNECTIONS, request_timeout=30.0,
                                                     user_agent="kubus-executor/bench"))
        api = KubeApi(http, limiter=TokenBucket(0, 0), metrics=ExecutorMetrics(), stopping=asyncio.Event())
        loop.run_until_complete(post_all(api, bodies[:CONNECTIONS], [], CONNECTIONS))  # connections opened, uncounted

        def drive() -> None:
            loop.run_until_complete(post_all(api, bodies, answers, in_flight))

        if "--check" in sys.argv:
            drive()
            received = loop.run_until_complete(http.request("GET", "/digest")).body.decode()
            print(f"{pods} creates: answers {sorted({status for status, _ in answers})}, digest "
                  f"{hashlib.sha256(repr(sorted(answers)).encode()).hexdigest()}\n  server received {received}")
        else:
            sys.call_tracing(drive, ())
        loop.run_until_complete(api.close())
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
