"""Stand-ins for upstreams that cannot run here, speaking their exact HTTP protocols.

Each is a FastAPI app that validates requests the way the real server does,
answers in the real server's format (api_v2 WAV or streamed WAV and
``{"message"}`` errors; CosyVoice's headerless int16 PCM; OpenAI's WAV and
``{"error": {"message"}}``), records every call it receives, and renders a tone
whose pitch follows every input — so a test can tell takes apart by samples.
The GPT-SoVITS one also fails as the real one does: ``{"message": "tts failed",
"Exception": …}`` with the server's absolute paths (and, for ``CRASH_TEXT``, a traceback).
"""

from __future__ import annotations

import asyncio
import io
import time
import traceback
import wave
from pathlib import Path
from typing import Annotated, Any

import blake3
import numpy as np
import soundfile
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response, StreamingResponse

GSV_RATE = 32000
COSY_RATE = 24000
OPENAI_RATE = 24000
Text = Annotated[str, Form()]
Clip = Annotated[UploadFile, File()]
CRASH_TEXT = "crash"
"""Text that makes the GPT-SoVITS stand-in answer with a traceback in ``Exception``."""
GSV_LANGUAGES = ("auto", "auto_yue", "en", "zh", "ja", "yue", "ko", "all_zh", "all_ja",
                 "all_yue", "all_ko")


def tone(identity: str, rate: int, seconds: float = 0.3) -> np.ndarray:
    """int16 samples of a tone whose pitch is a hash of ``identity``."""
    seed = int.from_bytes(blake3.blake3(identity.encode()).digest()[:4], "little")
    t = np.arange(int(rate * seconds)) / rate
    return (0.4 * np.sin(2 * np.pi * (200 + seed % 800) * t) * 32767).astype("<i2")


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV")  # int16 in → PCM_16, as api_v2 writes
    return buffer.getvalue()


def gpt_sovits_app(root: Path) -> FastAPI:
    """api_v2's /tts: paths relative to ``root`` (its working folder), api_v2 validation."""
    app = FastAPI()
    app.state.calls = []

    async def handle(req: dict[str, Any]) -> Response:
        app.state.calls.append(req)
        for name in ("ref_audio_path", "text", "text_lang", "prompt_lang"):
            if req.get(name) in (None, ""):
                return JSONResponse({"message": f"{name} is required"}, status_code=400)
        if req["text_lang"].lower() not in GSV_LANGUAGES:
            return JSONResponse({"message": f"text_lang: {req['text_lang']} is not supported "
                                 "in version v2"}, status_code=400)
        if req.get("media_type", "wav") not in ("wav", "raw", "ogg", "aac"):
            return JSONResponse({"message": "media_type is not supported"}, status_code=400)
        if req["text"] == CRASH_TEXT:  # a model failure, answered as GPT-SoVITS forks do
            try:
                _load_model(root / "GPT_weights" / "missing.ckpt")
            except OSError:
                return JSONResponse({"message": "tts failed", "Exception": traceback.format_exc()},
                                    status_code=400)
        try:
            ref = (root / req["ref_audio_path"]).read_bytes()
        except OSError as exc:
            return JSONResponse({"message": "tts failed", "Exception": str(exc)},
                                status_code=400)
        aux = sorted(blake3.blake3((root / p).read_bytes()).hexdigest()
                     for p in req.get("aux_ref_audio_paths") or [])
        identity = repr((req["text"], blake3.blake3(ref).hexdigest(), aux,
                         *(req.get(k) for k in ("prompt_text", "top_k", "seed", "speed_factor",
                                                "temperature", "text_split_method"))))
        samples = tone(identity, GSV_RATE)
        if req.get("streaming_mode") in (0, False, None):
            return Response(wav_bytes(samples, GSV_RATE), media_type="audio/wav")
        return StreamingResponse(_streamed(samples), media_type="audio/wav")

    @app.get("/tts")
    async def tts_get(request: Request) -> Response:
        query = dict(request.query_params)
        return await handle(query)

    @app.post("/tts")
    async def tts_post(request: Request) -> Response:
        return await handle(await request.json())

    return app


def _load_model(path: Path) -> None:
    """Fail the way a model load does: an OSError naming the absolute path, deep in a stack."""
    path.read_bytes()


def _streamed(samples: np.ndarray):
    """api_v2 streaming: a WAV header that claims no frames, then raw PCM chunks."""
    header = io.BytesIO()
    with wave.open(header, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(GSV_RATE)
    yield header.getvalue()
    for part in np.array_split(samples, 3):
        yield part.tobytes()


def cosyvoice_app() -> FastAPI:
    """CosyVoice's FastAPI server: GET and POST, form fields, raw int16 PCM answers."""
    app = FastAPI()
    app.state.calls = []
    speakers = ("中文女", "英文男")

    def answer(route: str, **fields: Any) -> Response:
        app.state.calls.append({"route": route, **fields})
        if fields.get("spk_id") is not None and fields["spk_id"] not in speakers:
            return JSONResponse({"detail": f"unknown speaker {fields['spk_id']}"},
                                status_code=500)
        return StreamingResponse(iter([tone(repr(sorted(fields.items())), COSY_RATE).tobytes()]))

    def both(path: str):
        return app.api_route(path, methods=["GET", "POST"])

    @both("/inference_sft")
    async def sft(tts_text: Text, spk_id: Text) -> Response:
        return answer("sft", tts_text=tts_text, spk_id=spk_id)

    @both("/inference_zero_shot")
    async def zero_shot(tts_text: Text, prompt_text: Text, prompt_wav: Clip) -> Response:
        clip = blake3.blake3(await prompt_wav.read()).hexdigest()
        return answer("zero_shot", tts_text=tts_text, prompt_text=prompt_text, prompt_wav=clip)

    @both("/inference_cross_lingual")
    async def cross_lingual(tts_text: Text, prompt_wav: Clip) -> Response:
        clip = blake3.blake3(await prompt_wav.read()).hexdigest()
        return answer("cross_lingual", tts_text=tts_text, prompt_wav=clip)

    @both("/inference_instruct")
    async def instruct(tts_text: Text, spk_id: Text, instruct_text: Text) -> Response:
        return answer("instruct", tts_text=tts_text, spk_id=spk_id, instruct_text=instruct_text)

    @both("/inference_instruct2")
    async def instruct2(tts_text: Text, instruct_text: Text, prompt_wav: Clip) -> Response:
        clip = blake3.blake3(await prompt_wav.read()).hexdigest()
        return answer("instruct2", tts_text=tts_text, instruct_text=instruct_text,
                      prompt_wav=clip)

    return app


def openai_app(api_key: str = "sk-test", voices: tuple[str, ...] | None = None) -> FastAPI:
    """An OpenAI-compatible speech server: bearer auth, WAV out, OpenAI-style errors."""
    app = FastAPI()
    app.state.calls = []

    def error(message: str, status: int) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}},
                            status_code=status)

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {api_key}":
            return error("Incorrect API key provided", 401)
        body = await request.json()
        app.state.calls.append(body)
        if body.get("input") == "fail":
            return error("the model crashed", 500)
        samples = tone(repr(sorted(body.items())), OPENAI_RATE)
        return Response(wav_bytes(samples, OPENAI_RATE), media_type="audio/wav")

    if voices is not None:
        @app.get("/v1/audio/voices")
        async def list_voices() -> dict[str, Any]:
            return {"voices": [{"id": v, "name": v} for v in voices]}

    return app


# --- CosyVoice, streaming as server.py on main does -------------------------------------------

COSY_TEAR_TEXT = "tear"
"""Text that makes ``StreamingCosyVoice`` break its answer off after the first chunk."""


class StreamingCosyVoice:
    """CosyVoice's ``server.py`` as on main, in front of a model that takes its time.

    Every ``/inference_*`` route answers GET and POST with FastAPI ``Form()``/``File()``
    fields as server.py declares them (so a bad request gets FastAPI's own 422), and
    streams int16 PCM as ``generate_data`` does: one chunk per model output, the first
    at once and each next one ``interval`` seconds later. Like the real server it checks
    nothing before it streams: a ``spk_id`` outside ``speakers`` fails inside the
    generator (the real one's ``KeyError`` in ``frontend_sft``), so the client gets a
    200 whose body breaks off before any audio; with ``refuse_unknown_speakers`` it
    answers 400 ``{"detail"}`` up front instead, as a server or proxy that checks does.
    ``COSY_TEAR_TEXT`` breaks the body off after the first chunk (a model crash mid-take).

    ``calls`` records each request's route and fields (a clip by its hash and size),
    ``sent`` the bytes each answer streamed, ``sent_at`` the ``time.monotonic()`` at
    which each chunk was handed to the server.
    """

    CHUNK_SECONDS = 0.25

    def __init__(self, interval: float = 1.0, chunks: int = 4,
                 speakers: tuple[str, ...] = ("中文女", "英文男", "my_clone"),
                 refuse_unknown_speakers: bool = False) -> None:
        self.interval = interval
        self.chunks = chunks
        self.speakers = speakers
        self.refuse_unknown_speakers = refuse_unknown_speakers
        self.calls: list[dict[str, Any]] = []
        self.sent: list[bytearray] = []
        self.sent_at: list[list[float]] = []
        self.app = self._build()

    def _answer(self, route: str, **fields: Any) -> Response:
        self.calls.append({"route": route, **fields})
        self.sent.append(bytearray())
        self.sent_at.append([])
        speaker = fields.get("spk_id")
        unknown = speaker is not None and speaker not in self.speakers
        if unknown and self.refuse_unknown_speakers:
            return JSONResponse({"detail": f"spk_id {speaker!r} is not a speaker of this "
                                 f"model; it has {', '.join(self.speakers)}"}, status_code=400)
        identity = repr(sorted(fields.items()))
        samples = tone(identity, COSY_RATE, self.CHUNK_SECONDS * self.chunks)
        return StreamingResponse(self._generate(samples, len(self.calls) - 1, unknown,
                                                fields["tts_text"] == COSY_TEAR_TEXT))

    async def _generate(self, samples: np.ndarray, call: int, unknown_speaker: bool,
                        tear: bool):
        if unknown_speaker:
            raise KeyError(self.calls[call]["spk_id"])
        for number, part in enumerate(np.array_split(samples, self.chunks)):
            if number:
                await asyncio.sleep(self.interval)
            if tear and number == 1:
                raise RuntimeError("the model crashed mid-take")
            data = part.tobytes()
            self.sent[call] += data
            self.sent_at[call].append(time.monotonic())
            yield data

    def _build(self) -> FastAPI:
        app = FastAPI()

        def both(path: str):
            return app.api_route(path, methods=["GET", "POST"])

        async def clip_of(upload: UploadFile) -> str:
            data = await upload.read()
            return f"{blake3.blake3(data).hexdigest()}:{len(data)}"

        @both("/inference_sft")
        async def sft(tts_text: Text, spk_id: Text) -> Response:
            return self._answer("sft", tts_text=tts_text, spk_id=spk_id)

        @both("/inference_zero_shot")
        async def zero_shot(tts_text: Text, prompt_text: Text, prompt_wav: Clip) -> Response:
            return self._answer("zero_shot", tts_text=tts_text, prompt_text=prompt_text,
                                prompt_wav=await clip_of(prompt_wav))

        @both("/inference_cross_lingual")
        async def cross_lingual(tts_text: Text, prompt_wav: Clip) -> Response:
            return self._answer("cross_lingual", tts_text=tts_text,
                                prompt_wav=await clip_of(prompt_wav))

        @both("/inference_instruct")
        async def instruct(tts_text: Text, spk_id: Text, instruct_text: Text) -> Response:
            return self._answer("instruct", tts_text=tts_text, spk_id=spk_id,
                                instruct_text=instruct_text)

        @both("/inference_instruct2")
        async def instruct2(tts_text: Text, instruct_text: Text, prompt_wav: Clip) -> Response:
            return self._answer("instruct2", tts_text=tts_text, instruct_text=instruct_text,
                                prompt_wav=await clip_of(prompt_wav))

        return app
