"""An edge's fallback: while the center is unreachable, a miss is answered by a local engine.

The fallback is a second app over the same cache folder (``app.fallback_app``) with the
local engine, so every route works as for the center's takes. ``EdgeFallback`` replays a
request the edge answered with 503 *while its center is offline* to it, answering with
``X-Cache: FALLBACK`` (else the original 503 goes out). The fallback's model revision is
marked (``+edge-fallback``), so its takes can never be stored under a center key.
docs/operating/edge.md, "The edge".
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class EdgeFallback:
    """Replay a request the edge could not answer (503, center offline) to the fallback."""

    def __init__(self, app: ASGIApp, edge: Any, fallback: ASGIApp) -> None:
        self.app = app
        self.edge = edge
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/v1/packs"):
            await self.app(scope, receive, send)
            return
        original = dict(scope)
        body: list[Message] = []
        held: list[Message] = []

        async def recording() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message)
            return message

        async def watching(message: Message) -> None:
            if held or (message["type"] == "http.response.start" and message["status"] == 503
                        and self.edge.offline):
                held.append(message)
            else:
                await send(message)

        await self.app(scope, recording, watching)
        if held:
            await self._fall_back(original, body, receive, held, send)

    async def _fall_back(self, scope: Scope, body: list[Message], receive: Receive,
                         held: list[Message], send: Send) -> None:
        pending = list(body)

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        answered = False

        async def relay(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                if not 200 <= message["status"] < 300:
                    return  # the fallback refused too: the client gets the edge's 503
                answered = True
                message = {**message, "headers": _marked(message["headers"], self.edge)}
            if answered:
                await send(message)

        try:
            await self.fallback(scope, replay, relay)
        finally:
            if not answered:
                for message in held:
                    await send(message)


def _marked(headers: list[tuple[bytes, bytes]], edge: Any) -> list[tuple[bytes, bytes]]:
    """``X-Cache: FALLBACK``, keeping the fallback's own status and naming its engine."""
    own = next((v for k, v in headers if k.lower() == b"x-cache"), b"")
    kept = [(k, v) for k, v in headers if k.lower() != b"x-cache"]
    engine = edge.fallback_engine
    return [*kept, (b"x-cache", b"FALLBACK"), (b"x-cache-fallback", own),
            (b"x-voxcache-fallback-engine",
             f"{engine.id} {engine.model_revision}".encode("latin-1", "replace"))]
