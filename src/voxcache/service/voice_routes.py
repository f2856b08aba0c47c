"""Voice routes: upload a reference clip (or a tensor voice) once, then name it in requests.

An upload also derives the voice's speaker embedding (``voice_artifacts``), which
``GET /v1/voices/{id}/embedding`` returns as a safetensors file and
``POST /v1/voices/{id}/compare`` measures against another voice or a clip.

Every route is scoped to the caller's tenant: another tenant's voice id is a
404, exactly like an id that never existed — the voice is looked up in the
caller's own folder first, so nothing of the other tenant's is read or derived.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Query, Request, Response, UploadFile
from fastapi.responses import JSONResponse

from ..errors import InvalidParameter, NotFound, UnsupportedFeature
from ..stages import Clip
from .errors import PayloadTooLarge
from .guard import tenant_of
from .options import OPENAI_VOICES
from .voice_artifacts import VoiceArtifacts
from .voices import Voice, is_safetensors

SAFETENSORS = "application/x-safetensors"

router = APIRouter(tags=["voices"])


@router.post("/v1/voices", status_code=201)
async def upload_voice(
    request: Request, response: Response,
    file: Annotated[UploadFile, File(description="reference clip (WAV, FLAC or OGG), or a "
                                     "tensor voice: a safetensors file holding one tensor "
                                     "of the engine's shape (GET /v1/engine: tensor_voice)")],
    prompt_text: Annotated[str | None, Form(max_length=4096,
                                            description="what the clip says")] = None,
    name: Annotated[str | None, Form(max_length=100)] = None,
    privacy: Annotated[bool | None, Form(description="keep only the fingerprint, never the "
                                         "clip")] = None,
    tenant: str = Depends(tenant_of),
) -> dict[str, Any]:
    """Store a clip (validated and fingerprinted) or a tensor voice (keyed by its content);
    the same clip or tensor twice is one voice."""
    state = request.app.state
    limit = state.options.max_upload_bytes
    clip = await file.read(limit + 1)
    if len(clip) > limit:
        raise PayloadTooLarge(f"reference clip is over the upload limit of {limit} bytes")
    if is_safetensors(clip):
        return await _upload_tensor(request, response, clip, name, tenant)
    private = state.options.privacy if privacy is None else privacy
    voice, created = await state.server.admission.read(
        state.voices.add, tenant, clip, prompt_text, name, private)
    # The voice is stored before its embedding is derived: an overload (503) or a timeout
    # here leaves a usable voice, and uploading again (a 200) derives what is missing.
    voice, embedding = await artifacts(request).upload_status(state.voices, voice, clip)
    response.status_code = 201 if created else 200
    return {**voice.public(), "kind": "uploaded", "embedding_status": embedding,
            "can_render": state.server.cached.engine.supports_reference and not voice.private}


async def _upload_tensor(request: Request, response: Response, data: bytes, name: str | None,
                         tenant: str) -> dict[str, Any]:
    state = request.app.state
    engine = state.server.cached.engine
    if engine.tensor_voice is None:
        raise UnsupportedFeature(
            f"engine {engine.id!r} takes no tensor voices (it takes: "
            f"{', '.join(engine.voice_kinds)}); upload a reference clip or name one of its "
            "voices")
    voice, created = await state.server.admission.read(
        state.voices.add_tensor, tenant, data, engine.tensor_voice, name)
    response.status_code = 201 if created else 200
    return {**voice.public(), "kind": "uploaded", "can_render": True}


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
async def delete_voice(
    voice_id: str, request: Request,
    purge: Annotated[bool, Query(description="also remove everything derived from the clip: "
                                 "takes, encodings, embeddings, prompts, tokens, sessions")
                     ] = False,
    tenant: str = Depends(tenant_of),
) -> Response:
    """Delete an uploaded voice (engine voices cannot be deleted: 404). Without ``purge``
    what was derived from it stays (stored takes are still served, by key or by a private
    upload of the same clip); with it, every artifact derived from the clip is removed
    first, in every tier and every process sharing the cache folder (200, with counts)."""
    state = request.app.state
    read = state.server.admission.read
    if voice_id in state.server.cached.engine.voices:
        raise NotFound(f"{voice_id!r} is a built-in voice of the engine; it cannot be deleted")
    if not purge:
        await read(state.voices.delete, tenant, voice_id)
        return Response(status_code=204)
    voice = await read(state.voices.get, tenant, voice_id)
    # Purged before the record goes: if the purge fails, the id still names what to retry.
    removed = await read(artifacts(request).purge, tenant, voice.fingerprint)
    await read(state.voices.delete, tenant, voice_id)
    return JSONResponse({"id": voice_id, "deleted": True, "purged": removed,
                         "entries": sum(removed.values())})


@router.get("/v1/voices/{voice_id}/embedding", response_class=Response,
            responses={200: {"content": {SAFETENSORS: {}},
                             "description": "a safetensors file holding `embedding` (256 "
                                            "float32)"}})
async def voice_embedding(voice_id: str, request: Request,
                          tenant: str = Depends(tenant_of)) -> Response:
    """The voice's speaker embedding as a safetensors file (tensor ``embedding``, the
    voxcache envelope in ``__metadata__``); derived again from the kept clip if the cache
    lost it, 409 for a private voice whose embedding is gone."""
    voice = await _uploaded(request, tenant, voice_id)
    result = await artifacts(request).of_voice(request.app.state.voices, voice)
    etag = f'"{result.key}"'
    headers = {"ETag": etag, "Cache-Control": "private, no-cache",
               "X-Voxcache-Stage-Cache": result.cache.upper(),
               "Content-Disposition": f'attachment; filename="{voice.id}.embedding.safetensors"'}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(result.entry.blob, media_type=SAFETENSORS, headers=headers)


@router.post("/v1/voices/{voice_id}/compare")
async def compare_voice(
    voice_id: str, request: Request,
    voice: Annotated[str | None, Form(max_length=64, description="another uploaded voice id "
                                      "(vc_…) of yours")] = None,
    file: Annotated[UploadFile | None, File(description="or a clip: WAV, FLAC or OGG")] = None,
    tenant: str = Depends(tenant_of),
) -> dict[str, Any]:
    """Is this the same speaker? Cosine similarity of the two speaker embeddings and the
    documented threshold's verdict. Both voices are looked up (in the caller's tenant)
    before anything is derived; a clip is measured, never stored."""
    state = request.app.state
    if (voice is None) == (file is None):
        raise InvalidParameter("send one thing to compare with: 'voice' (another uploaded "
                               "voice id) or 'file' (a clip), not both and not neither")
    subject = await _uploaded(request, tenant, voice_id)
    other = await _uploaded(request, tenant, voice) if voice is not None else None
    clip = None
    if file is not None:
        limit = state.options.max_upload_bytes
        data = await file.read(limit + 1)
        if len(data) > limit:
            raise PayloadTooLarge(f"the clip is over the upload limit of {limit} bytes")
        clip = await state.server.admission.read(Clip.of, data, state.options.max_upload_seconds)
    derived = artifacts(request)
    mine = await derived.of_voice(state.voices, subject, current=True)
    if other is not None:
        theirs = await derived.of_voice(state.voices, other, current=True)
        against: dict[str, Any] = {"voice": other.id}
    else:
        assert clip is not None
        theirs = await derived.derive(tenant, clip)
        against = {"clip": {"fingerprint": clip.fingerprint[:16],
                            "duration": round(clip.duration, 3)}}
    verdict = derived.compare(mine, theirs)
    return {"voice": subject.id, "against": against, "similarity": verdict.similarity,
            "same_speaker": verdict.same_speaker, "threshold": verdict.threshold,
            "revision": verdict.revision}


async def _uploaded(request: Request, tenant: str, voice_id: str) -> Voice:
    """One of the caller's uploaded voices, read in the I/O pool (``NotFound`` for an
    engine voice, an unknown id and another tenant's id alike)."""
    if voice_id in request.app.state.server.cached.engine.voices:
        raise NotFound(f"{voice_id!r} is a built-in voice of the engine; only uploaded voices "
                       "have a speaker embedding")
    voice: Voice = await request.app.state.server.admission.read(
        request.app.state.voices.get, tenant, voice_id)
    if voice.kind == "tensor":
        raise InvalidParameter(f"{voice_id!r} is a tensor voice: it has no clip, so no "
                               "speaker embedding to derive or compare")
    return voice


def artifacts(request: Request) -> VoiceArtifacts:
    """The app's ``VoiceArtifacts``, made on first use (routes run on the event loop, one
    at a time here, so no lock is needed)."""
    state = request.app.state
    found = getattr(state, "voice_artifacts", None)
    if found is None:
        server = state.server
        found = state.voice_artifacts = VoiceArtifacts(
            server.cache, server.admission, server.timeout, state.options.max_upload_seconds)
    return found
