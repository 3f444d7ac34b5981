"""The least an extender can be on kube-scheduler's path: the floor bench/real_scheduler.py
measures gpupair against.

An asyncio Protocol on uvloop that reads kube-scheduler's requests as its Go client sends them
(a request line, headers, a Content-Length body; keep-alive) and nothing else: filter passes
every node it is offered (NodeNames echoed, nothing decoded beyond finding them), prioritize
scores every node 0, bind creates the Binding through the API client's session
(gpupair.kubeclient.kube.bind_pod, eight at a time, as gpupair's: a real write to the API
server, as any binding extender must make) and answers. No decisions, no metrics, no logs. What
kube-scheduler spends on its side of the protocol (its JSON, its HTTP client, its binding
goroutines waiting) is in this floor too.

    .venv/bin/python bench/floor_extender.py PORT KUBECONFIG
"""

from __future__ import annotations

import asyncio
import sys

import orjson

from gpupair.command.service import run_loop
from gpupair.kubeclient import kube

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class Floor(asyncio.Protocol):
    def __init__(self, api, slots: asyncio.Semaphore):
        self.api, self.slots = api, slots
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].split(b"\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head[1:]
                           if line[:15].lower() == b"content-length:"), 0)
            if len(self.buffer) < end + 4 + length:
                return  # the body is still coming
            body, self.buffer = self.buffer[end + 4:end + 4 + length], self.buffer[end + 4 + length:]
            self.answer(head[0].split(b" ")[1].rsplit(b"/", 1)[-1], body)

    def answer(self, verb: bytes, body: bytes) -> None:
        args = orjson.loads(body)
        if verb == b"bind":
            asyncio.get_running_loop().create_task(self._bind(args))
            return
        names = args.get("NodeNames") or [n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []]
        if verb == b"filter":
            self._write({"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})
        else:
            self._write([{"Host": name, "Score": 0} for name in names])

    async def _bind(self, args: dict) -> None:
        try:
            async with self.slots:
                await kube.bind_pod(self.api, args["PodNamespace"], args["PodName"], args["Node"],
                                    args.get("PodUID") or None)
            self._write({"Error": ""})
        except Exception as exc:  # noqa: BLE001 - the protocol's own error shape
            self._write({"Error": str(exc)})

    def _write(self, value: object) -> None:
        payload = orjson.dumps(value)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(OK % len(payload) + payload)


async def serve(port: int, kubeconfig: str) -> None:
    api = await kube.api_client(kubeconfig)
    slots = asyncio.Semaphore(8)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Floor(api, slots), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    run_loop(serve(int(sys.argv[1]), sys.argv[2]))
