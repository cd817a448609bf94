"""The ASGI app (Starlette): protocol v1 on the WebSocket at `/`, `/health`, `/metrics`, the OpenAI routes.

Every route is a thin adapter over `QtuiServer`; nothing here touches the scheduler directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute

from qtui.serve.auth import denied
from qtui.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from qtui.serve.openai.routes import ClientGone
from qtui.serve.openai.routes import routes as openai_routes
from qtui.serve.openai.schemas import ApiError

if TYPE_CHECKING:
    from qtui.serve.server import QtuiServer


def build_app(srv: QtuiServer) -> Starlette:
    async def health(request: Request) -> Response:
        status, body = srv.health()
        return JSONResponse(body, status_code=status)

    async def metrics(request: Request) -> Response:
        if (denial := denied(request, srv.settings.api_key)) is not None:
            return denial
        return Response(srv.render_metrics(), media_type=METRICS_CONTENT_TYPE)

    async def root(request: Request) -> Response:
        return PlainTextResponse("qtui: protocol v1 is a WebSocket at this path; HTTP: /health, /metrics, /v1/...\n",
                                 status_code=426, headers={"Upgrade": "websocket"})  # fmt: skip

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse(exc.body(), status_code=exc.status)

    async def client_gone(request: Request, exc: Exception) -> Response:
        return Response(status_code=499)  # nobody reads it

    routes = [
        WebSocketRoute("/", srv.handle_websocket),
        Route("/", root),
        Route("/health", health),
        Route("/metrics", metrics),
        *openai_routes(srv),
    ]
    app = Starlette(routes=routes, exception_handlers={ApiError: api_error, ClientGone: client_gone})
    app.state.max_body = 4 * srv.settings.max_message_bytes
    return app
