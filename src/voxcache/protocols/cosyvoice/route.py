"""CosyVoice-compatible ``/inference_*`` routes, as its FastAPI server serves them.

Written against ``runtime/python/fastapi/server.py`` (main), so its ``client.py`` works unchanged:
the same routes for GET and POST, the same form fields (a clip up to ``max_upload_bytes``), raw
int16 PCM streamed as it is produced (a take failing after its first chunk is cut off, never ended
cleanly, and not stored), FastAPI's own 422/400 refusals and ``{"detail": message}`` for voxcache's
(an upstream's 4xx keeps its status). The rate goes out as ``X-Sample-Rate`` and as the older
server's ``X-Custom-Header-sampleRate``. Details: docs/operating/gateway.md, "CosyVoice".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...errors import UpstreamError, VoxcacheError
from ...request import SynthesisRequest
from ...service.errors import PayloadTooLarge, error_response
from ...service.guard import render_priority
from ...service.options import ServiceOptions
from ...service.routes.compat import Streamed, serve_streamed, tenant_of
from . import mapping as api

ROUTE = "cosyvoice"
"""The route label of these requests in the service's metrics."""
STREAM_CHUNK = 64 * 1024
DEFAULT_MAX_PROMPT_BYTES = ServiceOptions().max_upload_bytes
"""The clip limit of an app without service options (routers mounted on a library app)."""


class _AnswersLikeFastAPI(APIRoute):
    """A route whose every refusal has the imitated server's shape.

    The service installs app-wide handlers that answer in its own ``{"error"}`` shape
    with 400 for a validation error; CosyVoice is a plain FastAPI app, so here the
    framework's refusals go to FastAPI's default handlers and voxcache's own errors
    (a dependency's 401 included) to ``_refusal``.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handle(request)
            except RequestValidationError as exc:
                response: Response = await request_validation_exception_handler(request, exc)
            except StarletteHTTPException as exc:
                response = await http_exception_handler(request, exc)
            except (VoxcacheError, TimeoutError) as exc:
                response = _refusal(exc)
            _count_refusal(request, response.status_code)
            return response

        return answer


router = APIRouter(tags=["cosyvoice"], dependencies=[Depends(render_priority)],
                   route_class=_AnswersLikeFastAPI)

Tenant = Annotated[str, Depends(tenant_of)]
Field = Annotated[str, Form()]
Clip = Annotated[UploadFile, File()]


def _get_and_post(path: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a route for POST and, as CosyVoice's server does, for GET (kept out of the
    schema: a GET with a form body is legal but confuses OpenAPI tools)."""
    def register(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        name = path.strip("/")
        router.add_api_route(path, endpoint, methods=["POST"], operation_id=f"cosyvoice_{name}")
        router.add_api_route(path, endpoint, methods=["GET"], include_in_schema=False)
        return endpoint
    return register


@_get_and_post("/inference_sft")
async def inference_sft(request: Request, tts_text: Field, spk_id: Field,
                        tenant: Tenant) -> Response:
    """A speaker of the model's ``spk2info``."""
    return await _respond(request, api.inference_sft(tts_text, spk_id, tenant))


@_get_and_post("/inference_zero_shot")
async def inference_zero_shot(request: Request, tts_text: Field,
                              prompt_text: Field, prompt_wav: Clip,
                              tenant: Tenant) -> Response:
    """Clone a voice from a clip and its transcript."""
    clip = await _read(request, prompt_wav)
    return await _respond(request, api.inference_zero_shot(tts_text, prompt_text, clip, tenant))


@_get_and_post("/inference_cross_lingual")
async def inference_cross_lingual(request: Request, tts_text: Field,
                                  prompt_wav: Clip,
                                  tenant: Tenant) -> Response:
    """Clone a voice from a clip alone."""
    clip = await _read(request, prompt_wav)
    return await _respond(request, api.inference_cross_lingual(tts_text, clip, tenant))


@_get_and_post("/inference_instruct")
async def inference_instruct(request: Request, tts_text: Field, spk_id: Field,
                             instruct_text: Field,
                             tenant: Tenant) -> Response:
    """A speaker of the model's ``spk2info`` with a style instruction."""
    return await _respond(request, api.inference_instruct(tts_text, spk_id, instruct_text,
                                                          tenant))


@_get_and_post("/inference_instruct2")
async def inference_instruct2(request: Request, tts_text: Field,
                              instruct_text: Field, prompt_wav: Clip,
                              tenant: Tenant) -> Response:
    """Clone a voice from a clip and follow a style instruction."""
    clip = await _read(request, prompt_wav)
    return await _respond(request, api.inference_instruct2(tts_text, instruct_text, clip,
                                                           tenant))


async def _read(request: Request, upload: UploadFile) -> bytes:
    """The uploaded clip, refused (413) over the service's upload limit."""
    options = getattr(request.app.state, "options", None)
    limit = options.max_upload_bytes if options is not None else DEFAULT_MAX_PROMPT_BYTES
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"prompt_wav is over the upload limit of {limit} bytes; "
                              "trim the clip")
    return data


async def _respond(request: Request, core: SynthesisRequest) -> Response:
    """Serve ``core`` and answer raw PCM as it is rendered (see the module docstring)."""
    streamed = await serve_streamed(request, core, ROUTE)
    rate = str(streamed.first.sample_rate)
    headers = {**streamed.headers, "X-Sample-Rate": rate, "X-Custom-Header-sampleRate": rate}
    return StreamingResponse(_pcm(streamed), headers=headers)


async def _pcm(streamed: Streamed) -> AsyncIterator[bytes]:
    """The take's PCM, each chunk as it exists (a stored one in pieces of STREAM_CHUNK).

    A failure of the render raises here, after the status went out: the server then
    closes the connection mid-body, which is how the client learns the take is torn.
    """
    async for chunk in streamed.chunks():
        pcm = chunk.pcm
        for start in range(0, len(pcm), STREAM_CHUNK):
            yield pcm[start:start + STREAM_CHUNK]


def _refusal(exc: VoxcacheError | TimeoutError) -> JSONResponse:
    """voxcache's refusal as a FastAPI app gives it (``{"detail": message}``), with the
    service's status, headers and ``{"error": …}`` body; an upstream's 4xx keeps its status."""
    service = error_response(exc)
    body = json.loads(bytes(service.body))
    body["detail"] = body["error"]["message"]
    status = service.status_code
    upstream = exc.upstream_status if isinstance(exc, UpstreamError) else None
    if upstream is not None and 400 <= upstream < 500:
        status = upstream
        body["error"]["type"] = "invalid_request_error"
    headers = {k: v for k, v in service.headers.items()
               if k.lower() in ("retry-after", "www-authenticate")}
    return JSONResponse(body, status_code=status, headers=headers)


def _count_refusal(request: Request, status: int) -> None:
    """Count a refused request under this route's label, as the service counts its own."""
    server = getattr(request.app.state, "server", None)
    if server is not None:
        server.metrics.request(ROUTE, "ERROR", status)
