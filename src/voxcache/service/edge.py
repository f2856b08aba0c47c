"""An edge's fallback: while the center is unreachable, a miss is answered by a local engine.

The fallback is a whole second app over the same cache folder, built by ``create_app``
(``app.fallback_app``)
with the fallback engine (``VoxcacheEdgeEngine.fallback_engine``, e.g. Piper on the
device), so every route, format and streaming mode works exactly as it does for the
center's takes. ``EdgeFallback`` sits in front of the edge's own app: a request that
the edge answers with 503 *while its center is offline* (the miss could not be
fetched) is replayed to the fallback app, and the fallback's answer goes out with
``X-Cache: FALLBACK`` (its own status in ``X-Cache-Fallback``, the engine in
``X-Voxcache-Fallback-Engine``). If the fallback refuses too, the original 503 goes
out, so the client still learns when to retry.

Why it cannot store a fallback take under a center key: the fallback app keys with
the fallback engine's identity, whose model revision is marked (``+edge-fallback``),
so every key it computes differs from every key the center could compute — its takes
are stored (and later served, while offline) under those keys only. When the center
is back, the same request keys as the center's again and is fetched from it.
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
