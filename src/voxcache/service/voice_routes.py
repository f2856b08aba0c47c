"""Voice routes: upload a reference clip once, then name it in synthesis requests.

Every route is scoped to the caller's tenant: another tenant's voice id is a
404, exactly like an id that never existed.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile

from ..errors import NotFound
from .errors import PayloadTooLarge
from .guard import tenant_of
from .options import OPENAI_VOICES

router = APIRouter(tags=["voices"])


@router.post("/v1/voices", status_code=201)
async def upload_voice(
    request: Request, response: Response,
    file: Annotated[UploadFile, File(description="reference clip: WAV, FLAC or OGG")],
    prompt_text: Annotated[str | None, Form(max_length=4096,
                                            description="what the clip says")] = None,
    name: Annotated[str | None, Form(max_length=100)] = None,
    privacy: Annotated[bool | None, Form(description="keep only the fingerprint, never the "
                                         "clip")] = None,
    tenant: str = Depends(tenant_of),
) -> dict[str, Any]:
    """Store a clip (validated and fingerprinted); the same clip twice is one voice."""
    state = request.app.state
    limit = state.options.max_upload_bytes
    clip = await file.read(limit + 1)
    if len(clip) > limit:
        raise PayloadTooLarge(f"reference clip is over the upload limit of {limit} bytes")
    private = state.options.privacy if privacy is None else privacy
    voice, created = await state.server.admission.read(
        state.voices.add, tenant, clip, prompt_text, name, private)
    response.status_code = 201 if created else 200
    return {**voice.public(), "kind": "uploaded",
            "can_render": state.server.cached.engine.supports_reference and not voice.private}


@router.get("/v1/voices")
async def list_voices(request: Request, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
    """The engine's own voices, the OpenAI aliases, and this tenant's uploaded voices."""
    state = request.app.state
    engine = state.server.cached.engine
    aliases = {name: engine.default_voice for name in OPENAI_VOICES}
    aliases.update(state.options.voice_aliases)
    uploaded = await state.server.admission.read(state.voices.list, tenant)
    return {
        "engine": engine.id,
        "default_voice": engine.default_voice,
        "supports_cloning": engine.supports_reference,
        "voices": [{"id": v, "kind": "engine"} for v in sorted(set(engine.voices.values()))]
        + [{**v.public(), "kind": "uploaded"} for v in uploaded],
        "aliases": aliases,
    }


@router.get("/v1/voices/{voice_id}")
async def get_voice(voice_id: str, request: Request,
                    tenant: str = Depends(tenant_of)) -> dict[str, Any]:
    """One voice: an engine voice by name, or one of this tenant's uploads by id."""
    engine = request.app.state.server.cached.engine
    if voice_id in engine.voices:
        return {"id": engine.voices[voice_id], "kind": "engine"}
    return {**request.app.state.voices.get(tenant, voice_id).public(), "kind": "uploaded"}


@router.delete("/v1/voices/{voice_id}", status_code=204)
async def delete_voice(voice_id: str, request: Request,
                       tenant: str = Depends(tenant_of)) -> Response:
    """Delete an uploaded voice (engine voices cannot be deleted: 404)."""
    voices = request.app.state.voices
    if voice_id in request.app.state.server.cached.engine.voices:
        raise NotFound(f"{voice_id!r} is a built-in voice of the engine; it cannot be deleted")
    await request.app.state.server.admission.read(voices.delete, tenant, voice_id)
    return Response(status_code=204)
