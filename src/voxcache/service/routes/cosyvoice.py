"""CosyVoice-compatible ``/inference_*`` routes, as its FastAPI server serves them.

Same routes (GET and POST, like the server), same form fields (``prompt_wav``
as a file upload), same answer: raw little-endian int16 mono PCM with no
header and no media type, streamed in chunks. A CosyVoice client assumes the
model's rate (22050 or 24000 Hz), so the rate is also sent as
``X-Sample-Rate`` (and as ``X-Custom-Header-sampleRate``, which some
CosyVoice forks send). Errors are FastAPI's ``{"detail": …}``, as the server's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from fastapi.responses import StreamingResponse

from ...errors import InvalidParameter, VoxcacheError
from ...request import SynthesisRequest
from ...upstream import cosyvoice_api as api
from ..guard import render_priority
from .compat import error_json, serve, tenant_of

router = APIRouter(tags=["cosyvoice"], dependencies=[Depends(render_priority)])
MAX_PROMPT_BYTES = 32 * 2**20
STREAM_CHUNK = 64 * 1024

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
    """A built-in speaker."""
    return await _respond(request, None, lambda _: api.inference_sft(tts_text, spk_id, tenant))


@_get_and_post("/inference_zero_shot")
async def inference_zero_shot(request: Request, tts_text: Field,
                              prompt_text: Field, prompt_wav: Clip,
                              tenant: Tenant) -> Response:
    """Clone a voice from a clip and its transcript."""
    return await _respond(request, prompt_wav, lambda clip: api.inference_zero_shot(
        tts_text, prompt_text, clip, tenant))


@_get_and_post("/inference_cross_lingual")
async def inference_cross_lingual(request: Request, tts_text: Field,
                                  prompt_wav: Clip,
                                  tenant: Tenant) -> Response:
    """Clone a voice from a clip alone."""
    return await _respond(request, prompt_wav, lambda clip: api.inference_cross_lingual(
        tts_text, clip, tenant))


@_get_and_post("/inference_instruct")
async def inference_instruct(request: Request, tts_text: Field, spk_id: Field,
                             instruct_text: Field,
                             tenant: Tenant) -> Response:
    """A built-in speaker with a style instruction."""
    return await _respond(request, None, lambda _: api.inference_instruct(
        tts_text, spk_id, instruct_text, tenant))


@_get_and_post("/inference_instruct2")
async def inference_instruct2(request: Request, tts_text: Field,
                              instruct_text: Field, prompt_wav: Clip,
                              tenant: Tenant) -> Response:
    """Clone a voice from a clip and follow a style instruction."""
    return await _respond(request, prompt_wav, lambda clip: api.inference_instruct2(
        tts_text, instruct_text, clip, tenant))


async def _read(upload: UploadFile | None) -> bytes | None:
    """The uploaded clip, refused when over the limit."""
    if upload is None:
        return None
    data = await upload.read(MAX_PROMPT_BYTES + 1)
    if len(data) > MAX_PROMPT_BYTES:
        raise InvalidParameter(f"prompt_wav is over {MAX_PROMPT_BYTES} bytes; trim the clip")
    return data


async def _respond(request: Request, upload: UploadFile | None,
                   build: Callable[[bytes | None], SynthesisRequest]) -> Response:
    """Map the form, serve it, and answer raw PCM in chunks (errors as ``{"detail"}``)."""
    try:
        core = build(await _read(upload))
        served = await serve(request, core, "cosyvoice")
    except VoxcacheError as exc:
        return error_json(exc, "detail")
    rate = str(served.audio.sample_rate)
    headers = {**served.headers, "X-Sample-Rate": rate, "X-Custom-Header-sampleRate": rate}
    return StreamingResponse(_chunks(served.audio.pcm), headers=headers)


def _chunks(pcm: bytes) -> Iterator[bytes]:
    for start in range(0, len(pcm), STREAM_CHUNK):
        yield pcm[start:start + STREAM_CHUNK]
