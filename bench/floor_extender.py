"""The least an extender can be on kube-scheduler's path: the floor bench/real_scheduler.py
measures gpupair against.

An asyncio Protocol on uvloop, requests parsed by httptools, keep-alive: filter passes every
node it is offered (NodeNames echoed, nothing decoded beyond finding them), prioritize scores
every node 0 and so lists none (as gpupair leaves out the nodes it scores 0), or with
``--score-every-node`` lists every node it is offered at 1 (alike, so kube-scheduler chooses as
without them, but decodes and adds an answer as long as gpupair's), bind creates the
Binding through gpupair's own Binding client (a real write to the API server, as any binding
extender must make) and answers. No decisions, no metrics, no logs. What kube-scheduler spends
on its side of the protocol (its JSON, its HTTP client, its binding goroutines waiting) is in
this floor too.

    .venv/bin/python bench/floor_extender.py PORT KUBECONFIG [--score-every-node]
"""

from __future__ import annotations

import asyncio
import sys

import httptools
import orjson

from gpupair.kubeclient import kube
from gpupair.kubeclient.binding_client import BindingClient
from gpupair.command.service import run_loop

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class Floor(asyncio.Protocol):
    def __init__(self, binder: BindingClient, score_every_node: bool = False):
        self.binder = binder
        self.score_every_node = score_every_node
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        verb = self.url.rsplit(b"/", 1)[-1]
        if verb == b"bind":
            asyncio.get_running_loop().create_task(self._bind(orjson.loads(body)))
            return
        scoring = self.score_every_node and verb.startswith(b"prioritize")
        if verb != b"filter" and not scoring:
            self._answer([])
            return
        args = orjson.loads(body)
        names = args.get("NodeNames") or [n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []]
        if scoring:
            self._answer([{"Host": name, "Score": 1} for name in names])
            return
        self._answer({"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})

    async def _bind(self, args: dict) -> None:
        try:
            await self.binder.bind(args["PodNamespace"], args["PodName"], args["Node"], args.get("PodUID") or None)
            self._answer({"Error": ""})
        except Exception as exc:  # noqa: BLE001 - the protocol's own error shape
            self._answer({"Error": str(exc)})

    def _answer(self, value: object) -> None:
        payload = orjson.dumps(value)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(OK % len(payload) + payload)


async def serve(port: int, kubeconfig: str, score_every_node: bool = False) -> None:
    api = await kube.api_client(kubeconfig)
    binder = BindingClient(api, limit=8)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Floor(binder, score_every_node), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    run_loop(serve(int(sys.argv[1]), sys.argv[2], "--score-every-node" in sys.argv[3:]))
