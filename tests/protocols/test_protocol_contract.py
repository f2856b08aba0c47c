"""GPT-SoVITS, CosyVoice and Piper's HTTP protocol pass the protocol contract: each route in
front of its upstream kind, against a server speaking the protocol (the stand-ins of
``tests/protocols/standins.py``; for Piper, Piper's own server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.protocols.servers import piper_http_server, serve_app
from voxcache.testing.protocol_contract import Call, Case, ProtocolContract, Standin

from .standins import cosyvoice_app, gpt_sovits_app, wav_bytes


def _clip(path: Path, pitch: float) -> Path:
    t = np.arange(16000 * 4) / 16000  # 4 s: GPT-SoVITS takes 3-10 s clips
    path.write_bytes(wav_bytes((0.3 * np.sin(2 * np.pi * pitch * t) * 32767).astype("<i2"),
                               16000))
    return path


class TestGptSovits(ProtocolContract):
    kind = "gpt-sovits"

    @pytest.fixture
    def refs(self, tmp_path: Path) -> Path:
        folder = tmp_path / "refs"
        folder.mkdir()
        _clip(folder / "alto.wav", 220)
        return folder

    @pytest.fixture
    def standin(self, refs: Path) -> Iterator[Standin]:
        app = gpt_sovits_app(refs)  # the upstream sees the folder where the gateway does
        with serve_app(app) as url:
            yield Standin(url, lambda: len(app.state.calls))

    @pytest.fixture
    def settings(self, refs: Path) -> dict[str, Any]:
        return {"reference_roots": (refs,)}

    @pytest.fixture
    def cases(self, refs: Path) -> list[Case]:
        def case(text: str, top_k: int) -> Case:
            fields = {"text": text, "text_lang": "en", "ref_audio_path": str(refs / "alto.wav"),
                      "prompt_lang": "en", "top_k": top_k}
            # what the gateway asks api_v2 for: every field, at api_v2's defaults
            asked = {**fields, "prompt_text": "", "seed": -1, "speed_factor": 1.0,
                     "temperature": 1.0, "text_split_method": "cut5"}
            return Case(Call("POST", "/tts", {"json": fields}), Call("POST", "/tts",
                                                                     {"json": asked}))

        return [case("Mind the gap.", 15), case("Mind the gap.", 5), case("Doors open.", 15)]

    @pytest.fixture
    def bad_calls(self, refs: Path) -> list[Call]:
        clip = str(refs / "alto.wav")
        fields = {"text": "Hi.", "text_lang": "en", "ref_audio_path": clip, "prompt_lang": "en"}
        return [Call("POST", "/tts", {"json": {k: v for k, v in fields.items() if k != "text"}}),
                Call("POST", "/tts", {"json": {**fields, "media_type": "mp3"}}),
                Call("POST", "/tts", {"json": {**fields, "ref_audio_path": "/etc/hostname"}}),
                Call("POST", "/tts", {"json": {**fields, "text": ["a", "list"]}}),
                Call("POST", "/tts", {"content": b"not json"}),
                Call("GET", "/tts", {"params": {**fields, "streaming_mode": "7"}})]


class TestCosyVoice(ProtocolContract):
    kind = "cosyvoice"

    @pytest.fixture
    def standin(self) -> Iterator[Standin]:
        app = cosyvoice_app()
        with serve_app(app) as url:
            yield Standin(url, lambda: len(app.state.calls))

    @pytest.fixture
    def settings(self) -> dict[str, Any]:
        return {"upstream_options": {"voices": ["中文女", "英文男"]}}

    @pytest.fixture
    def cases(self) -> list[Case]:
        def case(path: str, **fields: str) -> Case:
            return Case(Call("POST", path, {"data": fields}, answer="pcm"),
                        Call("POST", path, {"data": fields}, answer="pcm"))

        return [case("/inference_sft", tts_text="Mind the gap.", spk_id="中文女"),
                case("/inference_sft", tts_text="Mind the gap.", spk_id="英文男"),
                case("/inference_instruct", tts_text="Mind the gap.", spk_id="中文女",
                     instruct_text="Whisper.")]

    @pytest.fixture
    def bad_calls(self) -> list[Call]:
        return [Call("POST", "/inference_sft", {"data": {"spk_id": "中文女"}}),
                Call("POST", "/inference_zero_shot", {"data": {"tts_text": "Hi.",
                                                               "prompt_text": "Hello."}}),
                Call("POST", "/inference_instruct", {"data": {"tts_text": "Hi.",
                                                              "spk_id": "中文女",
                                                              "instruct_text": " "}})]


@pytest.fixture(scope="module")
def piper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with piper_http_server(tmp_path_factory.mktemp("piper-http")) as server:
        yield server


@pytest.mark.piper
class TestPiperHttp(ProtocolContract):
    kind = "piper-http"
    QUIET = {"noise_scale": 0, "noise_w_scale": 0}  # Piper is deterministic without noise

    @pytest.fixture
    def standin(self, piper_server: Any) -> Standin:
        return Standin(piper_server.url, piper_server.syntheses)

    @pytest.fixture
    def cases(self) -> list[Case]:
        def case(**fields: Any) -> Case:
            body = {**self.QUIET, **fields}
            return Case(Call("POST", "/synthesize", {"json": body}),
                        Call("POST", "/synthesize", {"json": body}))

        return [case(text="Mind the gap."), case(text="Doors open."),
                case(text="Mind the gap.", length_scale=1.3)]

    @pytest.fixture
    def bad_calls(self) -> list[Call]:
        return [Call("POST", "/synthesize", {"json": {"text": "  "}}),
                Call("POST", "/synthesize", {"content": b"not json"}),
                Call("POST", "/synthesize", {"json": {"text": 42}}),
                Call("POST", "/synthesize", {"json": {"text": "Hi.", "length_scale": "slow"}})]
