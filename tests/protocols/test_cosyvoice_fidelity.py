"""The ``/inference_*`` routes against CosyVoice's own server and client, as on main.

Written from ``runtime/python/fastapi/server.py`` and ``client.py``: each route
takes GET and POST with ``Form()`` fields and ``prompt_wav: UploadFile = File()``,
answers ``StreamingResponse(generate_data(model_output))`` — int16 PCM as the model
yields it — and FastAPI's own errors; the client sends the form with ``requests``
(``stream=True``), joins ``iter_content(chunk_size=16000)`` and reads int16.

``reference_server`` declares the server's routes with those exact fields on a
plain FastAPI app, so what "FastAPI's shape" and "the form the server takes" mean
is decided by FastAPI itself, not by this file. Everything runs on real uvicorn
servers; the voxcache side is the whole service (``create_app``).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import pytest
import requests
import soundfile
from fastapi import FastAPI, File, Form, Request, Response, UploadFile
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile as StarletteUpload

from voxcache import Cache, CachedEngine
from voxcache.config import Settings
from voxcache.engines.tone import ToneEngine
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions
from voxcache.upstream import load_upstream

from .servers import serve_app
from .standins import COSY_RATE, COSY_TEAR_TEXT, StreamingCosyVoice, tone

Text = Annotated[str, Form()]
Clip = Annotated[UploadFile, File()]
# client.py's defaults (its prompt is asset/zero_shot_prompt.wav: 24 kHz float WAV, 334 KB)
CLIENT_TEXT = "你好，我是通义千问语音合成大模型，请问有什么可以帮您的吗？"
CLIENT_SPEAKER = "中文女"
CLIENT_PROMPT_TEXT = "希望你以后能够做的比我还好呦。"
CLIENT_INSTRUCT = ("Theo 'Crimson', is a fiery, passionate rebel leader. "
                   "                                 Fights with fervor for justice, but "
                   "struggles with impulsiveness.")
_counter = itertools.count()


def reference_server() -> tuple[FastAPI, list[dict[str, Any]]]:
    """A plain FastAPI app with server.py's routes and fields, recording the raw form.

    It answers int16 PCM (a tone of its fields) like the server; what it records is
    every form item as received, so an extra or misnamed field would show.
    """
    app = FastAPI()
    received: list[dict[str, Any]] = []

    async def answer(request: Request, route: str) -> Response:
        items = (await request.form()).multi_items()
        kinds = {name: "file" if isinstance(value, StarletteUpload) else "text"
                 for name, value in items}
        received.append({"route": route, "method": request.method, "kinds": kinds,
                         "count": len(items)})
        pcm = tone(repr(sorted((name, str(value)) for name, value in items
                               if not isinstance(value, StarletteUpload))), COSY_RATE).tobytes()
        return StreamingResponse(iter([pcm]))

    def both(path: str):
        return app.api_route(path, methods=["GET", "POST"])

    @both("/inference_sft")
    async def sft(request: Request, tts_text: Text, spk_id: Text) -> Response:
        return await answer(request, "sft")

    @both("/inference_zero_shot")
    async def zero_shot(request: Request, tts_text: Text, prompt_text: Text,
                        prompt_wav: Clip) -> Response:
        return await answer(request, "zero_shot")

    @both("/inference_cross_lingual")
    async def cross_lingual(request: Request, tts_text: Text, prompt_wav: Clip) -> Response:
        return await answer(request, "cross_lingual")

    @both("/inference_instruct")
    async def instruct(request: Request, tts_text: Text, spk_id: Text,
                       instruct_text: Text) -> Response:
        return await answer(request, "instruct")

    @both("/inference_instruct2")
    async def instruct2(request: Request, tts_text: Text, instruct_text: Text,
                        prompt_wav: Clip) -> Response:
        return await answer(request, "instruct2")

    return app, received


def declared_fields(app: FastAPI) -> dict[str, dict[str, str]]:
    """route → {field: "file" or "text"}, from the app's own OpenAPI document."""
    with warnings.catch_warnings():  # GET and POST share an operation id, as on the server
        warnings.simplefilter("ignore", UserWarning)
        schema = app.openapi()
    bodies = schema["components"]["schemas"]
    fields = {}
    for path, operations in schema["paths"].items():
        ref = operations["post"]["requestBody"]["content"]
        body = next(iter(ref.values()))["schema"]["$ref"].rsplit("/", 1)[1]
        properties = bodies[body]["properties"]
        fields[path] = {name: "file" if "contentMediaType" in spec or spec.get("format") ==
                        "binary" else "text" for name, spec in properties.items()}
    return fields


@contextlib.contextmanager
def voxcache_service(tmp_path: Path, engine: Any, **options: Any) -> Iterator[tuple[str, Cache]]:
    """The whole voxcache service over ``engine`` on a real uvicorn server."""
    settings = Settings(cache_dir=tmp_path / f"cache-{next(_counter)}")
    cache = Cache(settings.cache_dir, settings.cache_config())
    app = create_app(settings, options=ServiceOptions(**options),
                     cached=CachedEngine(engine, cache))
    try:
        with serve_app(app) as url:
            yield url, cache
    finally:
        cache.close()


@contextlib.contextmanager
def cosyvoice_gateway(tmp_path: Path, standin: StreamingCosyVoice | FastAPI,
                      **options: Any) -> Iterator[tuple[str, str, Cache]]:
    """A stand-in upstream and voxcache in front of it: (gateway URL, upstream URL, cache)."""
    app = standin.app if isinstance(standin, StreamingCosyVoice) else standin
    with serve_app(app) as upstream:
        engine = load_upstream(f"cosyvoice={upstream}", retries=0)
        with voxcache_service(tmp_path, engine, **options) as (url, cache):
            yield url, upstream, cache


def wav_clip(seconds: float, rate: int, channels: int = 1, subtype: str = "PCM_16") -> bytes:
    """A noise-free sine clip as a WAV file (a different pitch per channel)."""
    t = np.arange(int(seconds * rate)) / rate
    samples = np.stack([0.3 * np.sin(2 * np.pi * (220 + 110 * c) * t)
                        for c in range(channels)], axis=1)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def stored(cache: Cache, key: str) -> bool:
    """Whether any tier of ``cache`` holds ``key``."""
    return cache.in_process.get(key) is not None or cache.read_disk(key) is not None


@pytest.fixture(scope="module")
def prompt_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prompt clip shaped like client.py's default (24 kHz mono float WAV, ~3.5 s)."""
    path = tmp_path_factory.mktemp("prompt") / "zero_shot_prompt.wav"
    path.write_bytes(wav_clip(3.5, 24000, subtype="FLOAT"))
    return path


# --- streaming ---------------------------------------------------------------------------------

class TimedRead:
    """Read a streamed response in a thread, noting when its first byte arrived."""

    def __init__(self, client: httpx.Client, url: str, form: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.first_byte: float | None = None
        self.body = bytearray()
        self.headers: dict[str, str] = {}
        self.status = 0
        self.error: Exception | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client, url, form))
        self._thread.start()

    def _run(self, client: httpx.Client, url: str, form: dict[str, str]) -> None:
        try:
            with client.stream("POST", url, data=form) as response:
                self.status, self.headers = response.status_code, dict(response.headers)
                self._ready.set()
                for piece in response.iter_raw():
                    if piece and self.first_byte is None:
                        self.first_byte = time.monotonic()
                    self.body += piece
        except Exception as exc:  # the test inspects what went wrong
            self.error = exc
        finally:
            self._ready.set()

    def wait_first_byte(self, limit: float = 30.0) -> None:
        deadline = time.monotonic() + limit
        while self.first_byte is None and self._thread.is_alive():
            assert time.monotonic() < deadline, "no byte arrived"
            time.sleep(0.005)

    def join(self) -> TimedRead:
        self._thread.join(60)
        assert not self._thread.is_alive()
        return self


def test_a_miss_streams_as_the_upstream_speaks_and_joiners_follow_live(tmp_path) -> None:
    """Chunks 1 s apart (the last at ~3 s): the first byte through the gateway arrives long
    before the last is sent, a second caller of the same key joins the render live, and
    the whole take, stored once, is what both heard."""
    standin = StreamingCosyVoice(interval=1.0, chunks=4)
    form = {"tts_text": "Your table is ready.", "spk_id": CLIENT_SPEAKER}
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, cache), \
            httpx.Client(timeout=60) as client:
        leader = TimedRead(client, f"{gateway}/inference_sft", form)
        leader.wait_first_byte()
        joiner = TimedRead(client, f"{gateway}/inference_sft", form)
        joiner.wait_first_byte()
        leader.join(), joiner.join()
        hit = client.post(f"{gateway}/inference_sft", data=form)
        key = hit.headers["X-Cache-Key"]
        kept = stored(cache, key)
    assert leader.error is None and joiner.error is None, (leader.error, joiner.error)
    last_sent = standin.sent_at[0][-1]
    assert leader.first_byte is not None and joiner.first_byte is not None
    assert leader.first_byte < standin.sent_at[0][1]  # live: before the upstream's second chunk
    assert leader.first_byte < last_sent and joiner.first_byte < last_sent
    assert (leader.headers["x-cache"], joiner.headers["x-cache"]) == ("MISS", "JOINED")
    assert bytes(leader.body) == bytes(joiner.body) == bytes(standin.sent[0]) == hit.content
    assert hit.headers["X-Cache"] == "HIT" and kept
    assert len(standin.calls) == 1


def test_a_torn_upstream_stream_cuts_every_caller_off_and_stores_nothing(tmp_path) -> None:
    """The upstream breaks off after its first chunk: the callers got that chunk and then
    a connection closed before the chunked body's end — never a clean, short take — and
    the next request renders again."""
    standin = StreamingCosyVoice(interval=0.5, chunks=4)
    form = {"tts_text": COSY_TEAR_TEXT, "spk_id": CLIENT_SPEAKER}
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, cache), \
            httpx.Client(timeout=60) as client:
        leader = TimedRead(client, f"{gateway}/inference_sft", form)
        leader.wait_first_byte()
        joiner = TimedRead(client, f"{gateway}/inference_sft", form)
        leader.join(), joiner.join()
        key = leader.headers["x-cache-key"]
        kept = stored(cache, key)
        again = TimedRead(client, f"{gateway}/inference_sft", form).join()
    for caller in (leader, joiner, again):
        assert caller.status == 200
        assert isinstance(caller.error, httpx.RemoteProtocolError), caller.error
        assert bytes(caller.body) == bytes(standin.sent[0])  # the first chunk, nothing more
    assert (leader.headers["x-cache"], joiner.headers["x-cache"]) == ("MISS", "JOINED")
    assert not kept and again.headers["x-cache"] == "MISS" and len(standin.calls) == 2


def test_a_caller_that_hangs_up_mid_take_does_not_stop_it(tmp_path) -> None:
    """The only caller goes away after the first chunk: the render goes on, the whole take
    is stored, and the next caller gets it as a hit without a second render."""
    standin = StreamingCosyVoice(interval=0.3, chunks=4)
    form = {"tts_text": "Gate four is closing.", "spk_id": CLIENT_SPEAKER}
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, cache), \
            httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{gateway}/inference_sft", data=form) as response:
            key = response.headers["X-Cache-Key"]
            next(response.iter_raw())
        wait = time.monotonic() + 30
        while not stored(cache, key):
            assert time.monotonic() < wait, "the take was never stored"
            time.sleep(0.05)
        hit = client.post(f"{gateway}/inference_sft", data=form)
    assert hit.headers["X-Cache"] == "HIT" and hit.content == bytes(standin.sent[0])
    assert len(standin.sent_at[0]) == 4 and len(standin.calls) == 1


# --- errors in FastAPI's shape -----------------------------------------------------------------

BAD_REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/inference_sft", {"data": {"tts_text": "Hi."}}),
    ("GET", "/inference_sft", {}),
    ("POST", "/inference_sft", {"data": {"tts_text": "", "spk_id": "alto"}}),
    ("POST", "/inference_instruct", {"data": {"tts_text": "Hi.", "spk_id": "alto"}}),
    ("POST", "/inference_zero_shot", {"data": {"tts_text": "Hi.", "prompt_text": "Hey."}}),
    ("POST", "/inference_cross_lingual", {"files": {"prompt_wav": (None, "not a file")},
                                          "data": {"tts_text": "Hi."}}),
    ("POST", "/inference_instruct2", {"json": {"tts_text": "Hi.", "instruct_text": "Softly."}}),
    ("POST", "/inference_sft", {"content": b"--x\r\nbroken",
                                "headers": {"content-type": "multipart/form-data"}}),
    ("POST", "/inference_cross_lingual", {"data": {"tts_text": "a" * 2**21},  # a 2 MB field
                                          "files": {"prompt_wav": ("p", b"RIFF")}}),
]


def test_what_fastapi_refuses_is_refused_as_fastapi_does(tmp_path) -> None:
    """Missing and empty fields, a clip sent as text, a JSON body, an unparsable multipart
    body: the same status and the same body as a FastAPI app with the server's fields."""
    reference, _ = reference_server()
    with serve_app(reference) as real, voxcache_service(tmp_path, ToneEngine()) as (ours, _):
        for method, path, kwargs in BAD_REQUESTS:
            expected = httpx.request(method, real + path, **kwargs, timeout=60)
            answered = httpx.request(method, ours + path, **kwargs, timeout=60)
            assert expected.status_code in (400, 422), expected.text
            assert (answered.status_code, answered.json()) == (
                expected.status_code, expected.json()), (method, path)
        missing = httpx.post(f"{ours}/inference_sft", data={"tts_text": "Hi."}, timeout=60).json()
    assert missing["detail"][0]["loc"] == ["body", "spk_id"]
    assert missing["detail"][0]["type"] == "missing"


# --- prompt clips of any size the service takes ------------------------------------------------

def test_a_3mb_prompt_clip_reaches_the_engine_and_the_upstream(tmp_path) -> None:
    """17 s of 48 kHz stereo (3.1 MB, a studio recording) on each cloning route; the
    upstream receives it byte for byte. Only past the upload limit is it a 413."""
    clip = wav_clip(17, 48000, channels=2)
    assert len(clip) > 3 * 2**20
    routes = {"/inference_zero_shot": {"prompt_text": "One two three."},
              "/inference_cross_lingual": {},
              "/inference_instruct2": {"instruct_text": "Slowly."}}
    standin = StreamingCosyVoice(interval=0.0, chunks=2)
    files = {"prompt_wav": ("prompt_wav", clip, "application/octet-stream")}
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, _), \
            voxcache_service(tmp_path, ToneEngine()) as (embedded, _):
        answers = [httpx.post(base + path, data={"tts_text": "Hello.", **fields},
                              files=files, timeout=60)
                   for base in (gateway, embedded) for path, fields in routes.items()]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.headers["X-Cache"] == "MISS" and len(answer.content) > 0
    assert [call["prompt_wav"].rsplit(":", 1)[1] for call in standin.calls] == \
        [str(len(clip))] * 3
    noise = np.random.default_rng(7).bytes(len(clip))  # 3 MB that is not audio
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, _):
        garbage = httpx.post(f"{gateway}/inference_cross_lingual", data={"tts_text": "Hi."},
                             files={"prompt_wav": ("prompt_wav", noise)}, timeout=60)
    assert garbage.status_code == 400, garbage.text
    assert "could not be decoded" in garbage.json()["detail"]
    assert len(standin.calls) == 3  # refused before the upstream
    limit = 2 * 2**20
    with voxcache_service(tmp_path, ToneEngine(), max_upload_bytes=limit) as (small, _):
        over_guard = httpx.post(f"{small}/inference_cross_lingual", data={"tts_text": "Hi."},
                                files=files, timeout=60)
        just_over = wav_clip((limit + 8000) / 2 / 24000, 24000)
        over_route = httpx.post(f"{small}/inference_cross_lingual", data={"tts_text": "Hi."},
                                files={"prompt_wav": ("p", just_over)}, timeout=60)
    assert over_guard.status_code == 413 and "over the limit" in over_guard.text
    assert over_route.status_code == 413 and str(limit) in over_route.json()["detail"]


# --- speakers are the upstream's to know -------------------------------------------------------

def test_any_spk_id_goes_to_the_upstream_and_its_4xx_stays_a_4xx(tmp_path) -> None:
    """A speaker the operator never listed (saved on the server with add_zero_shot_spk) is
    rendered and keyed by name; an unknown one is the upstream's to refuse: a 400 from it
    comes back a 400 in FastAPI's shape, and nothing is stored either way."""
    checking = StreamingCosyVoice(interval=0.0, chunks=2, refuse_unknown_speakers=True)
    with cosyvoice_gateway(tmp_path, checking) as (gateway, _, cache):
        unknown = [httpx.post(f"{gateway}/inference_sft",
                              data={"tts_text": "Hi.", "spk_id": "nobody"}, timeout=60)
                   for _ in range(2)]
        instruct = httpx.post(f"{gateway}/inference_instruct",
                              data={"tts_text": "Hi.", "spk_id": "nobody",
                                    "instruct_text": "Loudly."}, timeout=60)
        saved = [httpx.post(f"{gateway}/inference_sft",
                            data={"tts_text": "Hi.", "spk_id": name}, timeout=60)
                 for name in ("my_clone", "my_clone", "英文男")]
        nothing_kept = not stored(cache, unknown[0].headers.get("X-Cache-Key", "0" * 64))
    for answer in (*unknown, instruct):
        assert answer.status_code == 400, answer.text
        assert "not a speaker of this model" in answer.json()["detail"]
    assert [c["spk_id"] for c in checking.calls[:3]] == ["nobody", "nobody", "nobody"]
    assert [a.headers["X-Cache"] for a in saved] == ["MISS", "HIT", "MISS"]
    assert saved[0].content == saved[1].content != saved[2].content
    assert saved[0].headers["X-Cache-Key"] != saved[2].headers["X-Cache-Key"]
    assert nothing_kept


def test_an_unknown_speaker_on_the_real_server_is_a_502_not_a_take(tmp_path) -> None:
    """The real server streams before it looks the speaker up: a 200 whose body breaks off
    with no audio. The gateway has nothing to send, so it answers a proper error."""
    real_like = StreamingCosyVoice(interval=0.0, chunks=2)
    with cosyvoice_gateway(tmp_path, real_like) as (gateway, _, _):
        answer = httpx.post(f"{gateway}/inference_sft",
                            data={"tts_text": "Hi.", "spk_id": "nobody"}, timeout=60)
        again = httpx.post(f"{gateway}/inference_sft",
                           data={"tts_text": "Hi.", "spk_id": "nobody"}, timeout=60)
    assert answer.status_code == again.status_code == 502
    assert "detail" in answer.json() and len(real_like.calls) == 2


def test_other_routes_still_map_openai_voice_names_to_the_default_speaker(tmp_path) -> None:
    """Passing every spk_id on must not turn OpenAI's 'alloy' into a speaker name: on
    /v1/audio/speech it still means the default, and /v1/voices lists the declared ones."""
    standin = StreamingCosyVoice(interval=0.0, chunks=2)
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, _):
        speech = httpx.post(f"{gateway}/v1/audio/speech", timeout=60, json={
            "model": "tts-1", "input": "Hi.", "voice": "alloy", "response_format": "wav"})
        voices = httpx.get(f"{gateway}/v1/voices").json()
    assert speech.status_code == 200, speech.text
    assert standin.calls[-1]["spk_id"] == CLIENT_SPEAKER
    assert {v["id"] for v in voices["voices"] if v["kind"] == "engine"} >= {"中文女", "英文男"}


# --- the gateway sends exactly the server's form -----------------------------------------------

def test_the_gateway_sends_exactly_the_form_server_py_declares(tmp_path, prompt_wav) -> None:
    """Each mode reaches its route with exactly the fields the server declares (a clip as a
    file upload), nothing missing and nothing extra."""
    reference, received = reference_server()
    declared = declared_fields(reference)
    clip = prompt_wav.read_bytes()
    with cosyvoice_gateway(tmp_path, reference) as (gateway, _, _):
        for path, fields in declared.items():
            text = {name: "Hello." for name, kind in fields.items() if kind == "text"}
            if "spk_id" in text:
                text["spk_id"] = CLIENT_SPEAKER
            files = {"prompt_wav": ("prompt_wav", clip)} if "prompt_wav" in fields else None
            answer = httpx.post(gateway + path, data=text, files=files, timeout=60)
            assert answer.status_code == 200, (path, answer.text)
    assert len(received) == len(declared) == 5
    for call, (path, fields) in zip(received, declared.items(), strict=True):
        assert "/inference_" + call["route"] == path and call["method"] == "POST"
        assert call["kinds"] == fields and call["count"] == len(fields)


# --- CosyVoice's client.py, unchanged ----------------------------------------------------------

def client_py(base: str, mode: str, prompt_wav: Path, tts_text: str = CLIENT_TEXT,
              spk_id: str = CLIENT_SPEAKER) -> tuple[requests.Response, np.ndarray]:
    """client.py's ``main`` for one mode: the same calls, the same reading of the answer."""
    url = f"{base}/inference_{mode}"
    with prompt_wav.open("rb") as clip:
        if mode == "sft":
            payload = {"tts_text": tts_text, "spk_id": spk_id}
            response = requests.request("GET", url, data=payload, stream=True)
        elif mode == "zero_shot":
            payload = {"tts_text": tts_text, "prompt_text": CLIENT_PROMPT_TEXT}
            files = [("prompt_wav", ("prompt_wav", clip, "application/octet-stream"))]
            response = requests.request("GET", url, data=payload, files=files, stream=True)
        elif mode == "cross_lingual":
            payload = {"tts_text": tts_text}
            files = [("prompt_wav", ("prompt_wav", clip, "application/octet-stream"))]
            response = requests.request("GET", url, data=payload, files=files, stream=True)
        else:
            payload = {"tts_text": tts_text, "spk_id": spk_id, "instruct_text": CLIENT_INSTRUCT}
            response = requests.request("GET", url, data=payload, stream=True)
        tts_audio = b""
        for piece in response.iter_content(chunk_size=16000):
            tts_audio += piece
    return response, np.frombuffer(tts_audio, dtype=np.int16)


MODES = ("sft", "zero_shot", "cross_lingual", "instruct")


def _client_twice(base: str, mode: str, prompt_wav: Path, **fields: str) -> np.ndarray:
    """Run the client twice: a MISS, then a HIT with the very same samples."""
    (first, miss), (second, hit) = (client_py(base, mode, prompt_wav, **fields)
                                    for _ in range(2))
    assert (first.status_code, second.status_code) == (200, 200), first.text
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("MISS", "HIT")
    assert miss.size > 0 and np.array_equal(miss, hit)
    return miss


def test_client_py_through_the_gateway_in_all_four_modes(tmp_path, prompt_wav) -> None:
    """What the client decodes through voxcache is, sample for sample, what the server
    streamed for that request — on the miss and on the hit."""
    # 10 chunks of 0.25 s: as long as CosyVoice speaks CLIENT_TEXT (26 syllables) at its
    # fastest; fewer would be a truncated take to the quality gate, served but not stored
    standin = StreamingCosyVoice(interval=0.05, chunks=10)
    with cosyvoice_gateway(tmp_path, standin) as (gateway, _, _):
        for mode in MODES:
            samples = _client_twice(gateway, mode, prompt_wav)
            assert standin.calls[-1]["route"] == mode
            assert samples.tobytes() == bytes(standin.sent[-1])
    assert len(standin.calls) == 4


def test_client_py_with_the_tone_engine_in_all_four_modes(tmp_path, prompt_wav) -> None:
    engine = ToneEngine()
    with voxcache_service(tmp_path, engine) as (base, _):
        takes = [_client_twice(base, mode, prompt_wav, spk_id="bass") for mode in MODES]
    assert len(engine.calls) == 4
    assert all(not np.array_equal(a, b) for a, b in itertools.combinations(takes, 2))


@pytest.mark.piper
def test_client_py_sft_with_piper(tmp_path, piper, prompt_wav) -> None:
    with voxcache_service(tmp_path, piper) as (base, cache):
        samples = _client_twice(base, "sft", prompt_wav, tts_text="Your order is ready.",
                                spk_id="joe")
        response, _ = client_py(base, "sft", prompt_wav, tts_text="Your order is ready.",
                                spk_id="joe")
        entry = cache.get(response.headers["X-Cache-Key"])
    assert response.headers["X-Sample-Rate"] == "22050"
    assert entry is not None and bytes(entry[0].payload) == samples.tobytes()
    assert samples.size > 22050 // 2  # half a second of speech at least
