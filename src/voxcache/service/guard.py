"""Who is asking, how much they may send, and how urgently: tenant, body limits, priority.

With no keys configured every request is tenant ``default`` (the server then
binds to localhost only unless told otherwise — see ``cli/serve``). With keys,
a request without a known key is 401; the tenant it maps to namespaces every
key, voice and entry it can touch. Body limits are enforced in an ASGI
middleware before any route parses a byte, on the declared length and on the
bytes actually received (a lying or absent Content-Length cannot get past it).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidParameter
from .admission import PRIORITIES
from .errors import PayloadTooLarge, Unauthorized, error_body
from .options import ServiceOptions
from .serving import RENDER_PRIORITY

DEFAULT_TENANT = "default"
UPLOAD_PATHS = ("/v1/voices",)
MULTIPART_OVERHEAD = 64 * 1024


async def tenant_of(request: Request) -> str:
    """FastAPI dependency: the caller's tenant (401 when keys are set and this one is not).

    Async so that FastAPI calls it on the loop: a sync dependency costs a thread-pool hop
    on every request, hits included.
    """
    keys: dict[str, str] = request.app.state.options.api_keys
    tenant = tenant_for(keys, request.headers)
    if tenant is None:
        given = presented_key(request.headers)
        raise Unauthorized("missing or unknown API key: send 'Authorization: Bearer <key>'"
                           if not given else "unknown API key")
    return tenant


def tenant_for(keys: dict[str, str], headers: Mapping[str, str]) -> str | None:
    """The tenant whose API key the headers present; None when keys are set and it is not one."""
    if not keys:
        return DEFAULT_TENANT
    given = presented_key(headers)
    if given:
        for key, tenant in keys.items():
            if hmac.compare_digest(key.encode(), given.encode()):
                return tenant
    return None


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The API key a request presents (``Authorization: Bearer`` or ``X-API-Key``)."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key") or None


class BodyLimit:
    """Refuse request bodies over the configured limit with 413 (uploads get their own)."""

    def __init__(self, app: ASGIApp, options: ServiceOptions) -> None:
        self.app = app
        self.body_limit = options.max_body_bytes
        self.upload_limit = options.max_upload_bytes + MULTIPART_OVERHEAD

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE"):
            await self.app(scope, receive, send)
            return
        limit = self.upload_limit if scope["path"] in UPLOAD_PATHS else self.body_limit
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _refuse(send, limit)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
            return message

        await self.app(scope, limited, send)


async def _refuse(send: Send, limit: int) -> None:
    body = json.dumps(error_body(f"request body is over the limit of {limit} bytes",
                                 "invalid_request_error", code="PayloadTooLarge")).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def render_priority(request: Request) -> None:
    """FastAPI dependency: ``X-Voxcache-Priority: background`` queues this request's renders
    behind every interactive one (``voxcache warm --server`` sends it). Async on purpose:
    the context variable it sets must live in the endpoint's own task."""
    if getattr(request.app.state, "server", None) is None:
        return  # routers mounted on a library user's app: no admission control to order
    name = request.headers.get("x-voxcache-priority", "interactive").strip().lower()
    if name not in PRIORITIES:
        raise InvalidParameter(f"X-Voxcache-Priority must be one of {', '.join(PRIORITIES)}, "
                               f"got {name!r}")
    RENDER_PRIORITY.set(PRIORITIES[name])
