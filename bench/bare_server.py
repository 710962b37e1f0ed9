"""The baseline for the sim's create throughput: a bare aiohttp handler that decodes a pod into a
msgspec Struct, stores it in a dict and answers it back. Nothing the sim does is cheaper."""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import uvloop
import yaml
from aiohttp import web


class Meta(msgspec.Struct, omit_defaults=True):
    name: str = ""
    labels: dict[str, str] = {}


class Pod(msgspec.Struct, omit_defaults=True):
    metadata: Meta
    spec: dict[str, Any] = {}
    apiVersion: str = "v1"
    kind: str = "Pod"


store: dict[str, Pod] = {}
decoder = msgspec.json.Decoder(Pod)


async def create(request: web.Request) -> web.Response:
    pod = decoder.decode(await request.read())
    store[pod.metadata.name] = pod
    return web.Response(body=msgspec.json.encode(pod), status=201, content_type="application/json")


async def main(kubeconfig: str) -> None:
    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/pods", create)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    with open(kubeconfig, "w") as handle:
        yaml.safe_dump({"clusters": [{"cluster": {"server": f"http://127.0.0.1:{port}"}}]}, handle)
    import asyncio

    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1]))
