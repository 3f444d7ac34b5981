"""An HTTP server on a loopback socket that answers each request with the next of a list of
raw responses, counting connections and requests: what a well-behaved apiserver never does."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client as k8s

from gpupair.kubeclient import kube

CREATED = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'


class RawServer:
    """Answers each request with the next of ``answers`` (bytes, or None: close without answering),
    counting connections and requests."""

    def __init__(self, answers: list[bytes | None]):
        self.answers, self.connections, self.requests = list(answers), 0, []

    async def __aenter__(self) -> "RawServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0) if self.answers else None
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def raw_api_client(url: str) -> k8s.ApiClient:
    """An API client for ``url``, no credentials, set up as kube.api_client leaves every client."""
    config = type.__call__(k8s.Configuration)
    config.host = url
    api = k8s.ApiClient(configuration=config)
    kube.read_environment_once(api)
    return api
