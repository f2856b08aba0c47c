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
import json
import os
import sys
import time
import traceback
import wave
from collections.abc import Callable
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

    app.get("/set_refer_audio")(_set_refer_audio(root))
    return app


def _set_refer_audio(root: Path):
    """api_v2's ``/set_refer_audio`` for the stateless stand-in: fails as api_v2 does for a
    file it cannot open (this stand-in reads the clip again on every request anyway)."""

    async def set_refer_audio(refer_audio_path: str | None = None) -> Response:
        if not (root / (refer_audio_path or "")).is_file():
            return JSONResponse({"message": "set refer audio failed",
                                 "Exception": f"{root / (refer_audio_path or '')} not exists"},
                                status_code=400)
        return JSONResponse({"message": "success"})

    return set_refer_audio


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


# --- GPT-SoVITS api_v2 with the state its TTS pipeline keeps ----------------------------------

GSV_TEAR_TEXT = "tear"
"""Text that makes ``ApiV2`` break its streamed answer off after the first chunk."""
API_V2_SHAPING = {"prompt_text": (str, ""), "top_k": (int, 15), "top_p": (float, 1.0),
                  "temperature": (float, 1.0), "text_split_method": (str, "cut5"),
                  "seed": (int, -1), "speed_factor": (float, 1.0)}
"""Fields the ``ApiV2`` stand-in's take depends on, with api_v2's types and defaults."""
GSV_DEFAULT_WEIGHTS = {"t2s_weights_path": "GPT_SoVITS/pretrained_models/s1v3.ckpt",
                       "vits_weights_path": "GPT_SoVITS/pretrained_models/s2Gv2Pro.pth"}
"""What TTS_Config falls back to when the config names a file that does not exist."""


class ApiV2:
    """GPT-SoVITS ``api_v2.py`` over a model whose state behaves as ``TTS.py`` keeps it.

    - **Weights**: the config file (``config``, JSON standing in for ``tts_infer.yaml``'s
      ``custom`` section) names the GPT and SoVITS weights; at start each named file is
      loaded (a missing one falls back to ``GSV_DEFAULT_WEIGHTS``, as TTS_Config does).
      ``/set_gpt_weights`` sets the configured path and *saves the config before loading*;
      ``/set_sovits_weights`` saves only after a successful load. A takes' tone depends on
      the loaded weights' file contents, so a test hears which weights rendered it.
    - **Prompt cache**: one reference, keyed by its path *string*, loaded (3–10 s, as
      ``_set_prompt_semantic`` insists) only when a request names another path or
      ``/set_refer_audio`` is called; auxiliary clips are kept by their set of paths.
      A clip replaced in place keeps its old voice, as on the real server.
    - **Streaming** (``streaming_mode`` 1–3 or true): the model yields one chunk every
      ``interval`` seconds (the first after one interval); each is sent as it comes —
      for wav the header ``wave`` writes for zero frames, then raw PCM. ``GSV_TEAR_TEXT``
      fails the model after the first chunk, which breaks the body off.
    - **/control**: ``restart`` calls ``on_restart`` (the process stand-in re-executes
      itself, as api_v2 does, so its connection drops unanswered); ``exit`` stops.

    ``calls`` records /tts requests, ``sent_at`` the ``time.monotonic()`` of each chunk
    sent per call, ``reference_loads`` each path loaded into the prompt cache.
    """

    CHUNK_SECONDS = 0.5

    def __init__(self, root: Path, config: Path, *, interval: float = 0.0, chunks: int = 3,
                 on_restart: Callable[[], None] | None = None) -> None:
        self.root = root
        self.config = config
        self.interval = interval
        self.chunks = chunks
        self.on_restart = on_restart
        self.switch_seconds = 0.0
        self.calls: list[dict[str, Any]] = []
        self.sent_at: list[list[float]] = []
        self.reference_loads: list[str] = []
        self.configured = dict(GSV_DEFAULT_WEIGHTS)
        if config.exists():
            self.configured.update(json.loads(config.read_text()))
        self.loaded: dict[str, str] = {}
        for name in ("t2s_weights_path", "vits_weights_path"):
            if not (root / self.configured[name]).is_file():
                self.configured[name] = GSV_DEFAULT_WEIGHTS[name]
            self.loaded[name] = self._weights(self.configured[name])
        self._save()
        self.prompt: dict[str, Any] = {"ref_audio_path": None, "clip": None,
                                       "aux_ref_audio_paths": [], "aux": []}
        self.app = self._build()

    def _weights(self, path: str) -> str:
        """Load weights: a hash of the file (the built-in pretrained ones need no file)."""
        if path in GSV_DEFAULT_WEIGHTS.values():
            return f"pretrained:{path}"
        data = (self.root / path).read_bytes()  # FileNotFoundError names the absolute path
        if not data.startswith(b"weights"):
            raise RuntimeError(f"invalid load key, {data[:1]!r}: not a checkpoint")
        return blake3.blake3(data).hexdigest()

    def _save(self) -> None:
        self.config.write_text(json.dumps(self.configured))

    def _clip(self, path: str) -> str:
        file = self.root / path
        if not file.exists():
            raise ValueError(f"{file} not exists")
        samples, rate = soundfile.read(file)
        if not 3 <= len(samples) / rate <= 10:
            raise OSError("参考音频在3~10秒范围外，请更换！")
        self.reference_loads.append(path)
        return blake3.blake3(file.read_bytes()).hexdigest()

    def set_ref_audio(self, path: str) -> None:
        self.prompt["clip"] = self._clip(path)
        self.prompt["ref_audio_path"] = path

    def _run(self, req: dict[str, Any]) -> np.ndarray:
        """TTS.run's reference handling, then a tone of everything that shapes the take."""
        if req["ref_audio_path"] != self.prompt["ref_audio_path"]:
            self.set_ref_audio(req["ref_audio_path"])
        aux = list(req.get("aux_ref_audio_paths") or [])
        cached = self.prompt["aux_ref_audio_paths"]
        if not len(set(aux) & set(cached)) == len(aux) == len(cached):
            self.prompt["aux_ref_audio_paths"] = aux
            self.prompt["aux"] = [self._clip(p) for p in aux]
        typed = {name: kind(req.get(name, default))  # TTS_Request's types and defaults
                 for name, (kind, default) in API_V2_SHAPING.items()}
        identity = repr((req["text"], self.loaded, self.prompt["clip"], sorted(self.prompt["aux"]),
                         sorted(typed.items())))
        return tone(identity, GSV_RATE, self.CHUNK_SECONDS * self.chunks)

    async def _tts(self, req: dict[str, Any]) -> Response:
        self.calls.append(req)
        self.sent_at.append([])
        for name in ("ref_audio_path", "text", "text_lang", "prompt_lang"):
            if req.get(name) in (None, ""):
                return JSONResponse({"message": f"{name} is required"}, status_code=400)
        for name in ("text_lang", "prompt_lang"):
            if str(req[name]).lower() not in GSV_LANGUAGES:
                return JSONResponse({"message": f"{name}: {req[name]} is not supported in "
                                     "version v2"}, status_code=400)
        if req.get("media_type", "wav") not in ("wav", "raw", "ogg", "aac"):
            return JSONResponse({"message": f"media_type: {req['media_type']} is not "
                                 "supported"}, status_code=400)
        if req.get("text_split_method", "cut5") not in ("cut0", "cut1", "cut2", "cut3",
                                                          "cut4", "cut5"):
            return JSONResponse({"message": f"text_split_method:{req['text_split_method']} "
                                 "is not supported"}, status_code=400)
        try:
            samples = self._run(req)
        except Exception as exc:  # api_v2 answers every failure of the pipeline so
            return JSONResponse({"message": "tts failed", "Exception": str(exc)},
                                status_code=400)
        if str(req.get("streaming_mode", 0)).lower() in ("0", "false"):
            await asyncio.sleep(self.interval * self.chunks)
            return Response(wav_bytes(samples, GSV_RATE), media_type="audio/wav")
        return StreamingResponse(self._stream(samples, len(self.calls) - 1,
                                              req["text"] == GSV_TEAR_TEXT),
                                 media_type="audio/wav")

    async def _stream(self, samples: np.ndarray, call: int, tear: bool):
        for number, part in enumerate(np.array_split(samples, self.chunks)):
            await asyncio.sleep(self.interval)
            if tear and number == 1:
                raise RuntimeError("the model failed mid-take")
            if number == 0:
                header = io.BytesIO()
                with wave.open(header, "wb") as out:
                    out.setnchannels(1)
                    out.setsampwidth(2)
                    out.setframerate(GSV_RATE)
                yield header.getvalue()
            self.sent_at[call].append(time.monotonic())
            yield part.tobytes()

    async def _switch(self, name: str, path: str | None, what: str) -> JSONResponse:
        await asyncio.sleep(self.switch_seconds)  # loading weights takes its time
        if path in ("", None):
            return JSONResponse({"message": f"{what} weight path is required"},
                                status_code=400)
        self.configured[name] = path
        if name == "t2s_weights_path":
            self._save()  # init_t2s_weights saves before it loads
        try:
            self.loaded[name] = self._weights(path)
        except Exception as exc:
            return JSONResponse({"message": f"change {what} weight failed",
                                 "Exception": str(exc)}, status_code=400)
        self._save()
        return JSONResponse({"message": "success"})

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/tts")
        async def tts_get(request: Request) -> Response:
            return await self._tts(dict(request.query_params))

        @app.post("/tts")
        async def tts_post(request: Request) -> Response:
            return await self._tts(await request.json())

        @app.get("/set_gpt_weights")
        async def set_gpt_weights(weights_path: str | None = None) -> Response:
            return await self._switch("t2s_weights_path", weights_path, "gpt")

        @app.get("/set_sovits_weights")
        async def set_sovits_weights(weights_path: str | None = None) -> Response:
            return await self._switch("vits_weights_path", weights_path, "sovits")

        @app.get("/set_refer_audio")
        async def set_refer_audio(refer_audio_path: str | None = None) -> Response:
            try:
                self.set_ref_audio(refer_audio_path or "")
            except Exception as exc:
                return JSONResponse({"message": "set refer audio failed",
                                     "Exception": str(exc)}, status_code=400)
            return JSONResponse({"message": "success"})

        @app.get("/control")
        async def control(command: str | None = None) -> Any:
            if command is None:
                return JSONResponse({"message": "command is required"}, status_code=400)
            if command == "restart" and self.on_restart is not None:
                self.on_restart()  # never returns: the connection drops unanswered
            if command == "exit" and self.on_restart is not None:
                os._exit(0)
            return None

        return app


def _serve_api_v2() -> None:
    """``python -m tests.protocols.standins ROOT CONFIG PORT [INTERVAL]``: ``ApiV2`` as its own
    process, re-executing itself on ``/control?command=restart`` exactly as api_v2 does."""
    import uvicorn

    root, config, port = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0

    def restart() -> None:
        os.execv(sys.executable, [sys.executable, "-m", "tests.protocols.standins",
                                  *sys.argv[1:]])

    server = ApiV2(root, config, interval=interval, on_restart=restart)
    uvicorn.run(server.app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    _serve_api_v2()
