"""Who is asking, how much they may send, and how urgently: tenant, admin, body limits, priority.

Without keys every request is tenant ``default`` (and the server binds to localhost); with
keys an unknown key is 401, and the tenant namespaces everything it can touch; server-wide
figures need an ``[admin]`` key (a tenant's is 403). Bodies are counted as they arrive by an
ASGI middleware (a lying Content-Length or chunked body cannot pass): 413 past the limit,
408 past ``body_timeout``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import Collection, Mapping

from fastapi import Request
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidParameter
from ..scheduling import PRIORITIES, RENDER_PRIORITY
from .deadlines import Deadlines
from .errors import Forbidden, Unauthorized, error_body
from .options import ServiceOptions

DEFAULT_TENANT = "default"
UPLOAD_PATHS = ("/v1/voices", "/inference_zero_shot", "/inference_cross_lingual",
                "/inference_instruct2")
"""Routes whose body carries a reference clip (CosyVoice's ``prompt_wav`` too): the upload
limit, not the JSON body limit."""
UPLOAD_PATTERN = re.compile(r"/v1/voices/vc_[0-9a-f]{24}/compare")
"""A clip compared with a voice is an upload too."""
MULTIPART_OVERHEAD = 64 * 1024


async def tenant_of(request: Request) -> str:
    """FastAPI dependency: the caller's tenant (401 when keys are set and this one is not).

    Async so that FastAPI calls it on the loop: a sync dependency costs a thread-pool hop
    on every request, hits included.
    """
    return tenant_from(request.app.state.options, request.headers)


def tenant_from(options: ServiceOptions, headers: Mapping[str, str]) -> str:
    """The caller's tenant, or 401 saying what to send (``tenant_of`` without FastAPI)."""
    tenant = tenant_for(options.api_keys, headers)
    if tenant is None:
        given = presented_key(headers)
        if not given:
            raise Unauthorized("missing or unknown API key: send 'Authorization: Bearer <key>'")
        if _one_of(options.admin_keys, given):
            raise Unauthorized("that is an [admin] key: it reads /metrics and /v1/stats; "
                               "synthesis and entries need a key from [tenants.NAME] api_keys")
        raise Unauthorized("unknown API key")
    return tenant


async def admin_only(request: Request) -> None:
    """FastAPI dependency: server-wide figures need an ``[admin]`` key once any key is set.

    With no key configured at all (the localhost default) they stay open, like everything
    else. A tenant's key is refused (403): the figures cover every tenant.
    """
    options: ServiceOptions = request.app.state.options
    if not options.keyed:
        return
    given = presented_key(request.headers)
    if given and _one_of(options.admin_keys, given):
        return
    how = ("send a key from the config's [admin] api_keys" if options.admin_keys else
           "no admin key is configured: add [admin] api_keys = [\"<8+ chars>\"] to the config "
           "and send one")
    if not given:
        raise Unauthorized(f"this route needs an admin API key: {how} as "
                           "'Authorization: Bearer <key>'")
    if options.api_keys and tenant_for(options.api_keys, request.headers) is not None:
        raise Forbidden(f"a tenant's API key cannot read server-wide figures (they cover every "
                        f"tenant); {how}")
    raise Unauthorized(f"unknown API key; {how}")


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


def scope_tenant(keys: dict[str, str], scope: Scope) -> str | None:
    """``tenant_for`` of an ASGI request (its headers are not even wrapped when no keys are
    set: the plain endpoints' hits)."""
    return tenant_for(keys, Headers(scope=scope)) if keys else DEFAULT_TENANT


def caller_of(request: Request, tenant: str) -> str | None:
    """Who asks, as the tenant's ``[admission] caller`` names them — the API key presented,
    a header, or the peer's address — for ``admit_after``; None when the tenant does not
    count callers or the request does not say. The gate keeps only a hash of it."""
    gate = request.app.state.server.cached.gate
    if not gate.counts_callers:
        return None
    admission = gate.settings.for_tenant(tenant)
    if admission.admit_after <= 1:
        return None
    spec = admission.caller
    if spec == "api_key":
        value = presented_key(request.headers)
    elif spec == "client":
        value = request.client.host if request.client is not None else None
    else:
        value = request.headers.get(spec.removeprefix("header:"))
    return value or None


def _one_of(keys: Collection[str], given: str) -> bool:
    """True when ``given`` is one of ``keys`` (compared in constant time per key)."""
    return any(hmac.compare_digest(key.encode(), given.encode()) for key in keys)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The API key a request presents (``Authorization: Bearer`` or ``X-API-Key``)."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key") or None


class _OverLimit(Exception):
    """The body read so far is over the limit."""


class BodyLimit:
    """Read every request body before the app does: 413 as soon as it is over the limit
    (uploads get their own), 408 when it is too slow to arrive, else replay it to the app.

    Raising from inside ``receive`` instead (as this once did) reaches the route's body
    parser, which turns any error there into a 400; owning the read keeps the status
    honest and puts one deadline on the whole body, chunked or not (kept by ``Deadlines``:
    a timer per request would cost every POST more than the rest of this check).
    """

    def __init__(self, app: ASGIApp, options: ServiceOptions) -> None:
        self.app = app
        self.body_limit = options.max_body_bytes
        self.upload_limit = options.max_upload_bytes + MULTIPART_OVERHEAD
        self.body_timeout = options.body_timeout
        self.deadlines = Deadlines()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        uploads = path in UPLOAD_PATHS or (path.startswith("/v1/voices/")
                                           and UPLOAD_PATTERN.fullmatch(path) is not None)
        limit = self.upload_limit if uploads else self.body_limit
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body (a GET): nothing to count or wait for
            return
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(send, limit)
            return
        task = self.deadlines.start(self.body_timeout)
        try:
            body = await read_body(receive, limit)
        except asyncio.CancelledError:
            if not self.deadlines.overdue(task):
                raise
            await _refuse(send, 408, f"the request body did not arrive within "
                          f"{self.body_timeout:g} s; send it without pausing", "RequestTimeout",
                          close=True)
            return
        except _OverLimit:
            await _too_large(send, limit)
            return
        finally:
            self.deadlines.stop(task)
        if body is None:
            return  # the client went away mid-body: nobody to answer
        await self.app(scope, replay_body(body, receive), send)


async def read_body(receive: Receive, limit: float = float("inf")) -> list[bytes] | None:
    """The body's chunks as received (not joined: no second copy), or the rest of them;
    ``_OverLimit`` past ``limit`` bytes, None on disconnect."""
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > limit:
            raise _OverLimit
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks


def replay_body(chunks: list[bytes], receive: Receive) -> Receive:
    """A ``receive`` that hands out the body already read, then waits as the server's does
    (a streaming response listens on it for the client going away)."""
    pending = list(reversed(chunks or [b""]))

    async def replay() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": bool(pending)}
        return await receive()

    return replay


async def _too_large(send: Send, limit: int) -> None:
    await _refuse(send, 413, f"request body is over the limit of {limit} bytes", "PayloadTooLarge")


async def _refuse(send: Send, status: int, message: str, code: str, close: bool = False) -> None:
    body = json.dumps(error_body(message, "invalid_request_error", code=code)).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if close:  # the rest of a trickled body is not worth waiting for
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def render_priority(request: Request) -> None:
    """FastAPI dependency: ``X-Voxcache-Priority: background`` queues this request's renders
    behind every interactive one (``voxcache warm --server`` sends it). Async on purpose:
    the context variable it sets must live in the endpoint's own task."""
    if getattr(request.app.state, "server", None) is None:
        return  # routers mounted on a library user's app: no admission control to order
    set_priority(request.headers.get("x-voxcache-priority"))


def set_priority(header: str | None) -> None:
    """Order this task's renders by ``X-Voxcache-Priority`` (absent: interactive)."""
    name = ("interactive" if header is None else header).strip().lower()
    if name not in PRIORITIES:
        raise InvalidParameter(f"X-Voxcache-Priority must be one of {', '.join(PRIORITIES)}, "
                               f"got {name!r}")
    RENDER_PRIORITY.set(PRIORITIES[name])
