"""The reporter's HTTP app: /healthz, /readyz, /metrics, plus routes other parts add.

``extra_routes`` is how the node-local verdict endpoint (``POST /v1/verify``, see
reporter/main.py ``verification_routes``) joins the same server and port.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupair.command.service import add_health_routes

MAX_REQUEST_BYTES = 64 * 1024  # a verify request is a token and a pod name


def build_app(
    registry: CollectorRegistry,
    ready: Callable[[], bool] = lambda: True,
    extra_routes: Sequence[web.RouteDef] = (),
) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    add_health_routes(app, registry, ready)
    app.add_routes(list(extra_routes))
    return app
