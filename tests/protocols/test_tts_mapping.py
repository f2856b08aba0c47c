"""GPT-SoVITS ``/tts`` fields mapped onto engines that are not GPT-SoVITS."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from voxcache.errors import BadReferenceAudio, InvalidParameter, UnsupportedFeature
from voxcache.protocols.gpt_sovits.mapping import FIELDS, parse_streaming_mode, tts_call
from voxcache.references import ReferenceFolders

from .conftest import gateway_app
from .servers import serve_app
from .standins import wav_bytes

API_V2_DEFAULTS = {"top_k": 15, "top_p": 1, "temperature": 1, "text_split_method": "cut5",
                   "batch_size": 1, "batch_threshold": 0.75, "split_bucket": True,
                   "fragment_interval": 0.3, "seed": -1, "parallel_infer": True,
                   "repetition_penalty": 1.35, "sample_steps": 32, "super_sampling": False,
                   "overlap_length": 2, "min_chunk_length": 16, "speed_factor": 1.0,
                   "media_type": "wav", "streaming_mode": False, "aux_ref_audio_paths": [],
                   "prompt_text": ""}


def test_every_api_v2_field_is_known() -> None:
    assert set(API_V2_DEFAULTS) | {"text", "text_lang", "ref_audio_path", "prompt_lang"} == set(
        FIELDS)


def test_a_client_sending_every_default_is_served(tone) -> None:
    call = tts_call({"text": "Hi there.", "text_lang": "en", **API_V2_DEFAULTS}, tone)
    assert call.request.params == {} and call.request.seed is None
    assert call.request.language == "en" and (call.media_type, call.streaming) == ("wav", False)


@pytest.mark.parametrize("field, value", [("top_k", 5), ("temperature", "0.7"),
                                          ("text_split_method", "cut0"), ("batch_size", 4)])
def test_a_setting_the_engine_cannot_honour_is_refused(tone, field, value) -> None:
    with pytest.raises(UnsupportedFeature, match=field):
        tts_call({"text": "Hi.", "text_lang": "en", field: value}, tone)


def test_bad_values_are_refused(tone) -> None:
    with pytest.raises(InvalidParameter, match="text is required"):
        tts_call({"text": "", "text_lang": "en"}, tone)
    with pytest.raises(InvalidParameter, match="media_type: mp4"):
        tts_call({"text": "Hi.", "text_lang": "en", "media_type": "mp4"}, tone)
    with pytest.raises(InvalidParameter, match="streaming_mode"):
        parse_streaming_mode("4")
    assert [parse_streaming_mode(v) for v in (True, "false", 3, "2")] == [1, 0, 3, 2]


def test_reference_path_is_read_for_an_embedded_engine(tone, tmp_path, cached_piper) -> None:
    t = np.arange(8000) / 16000
    path = tmp_path / "ref.wav"
    path.write_bytes(wav_bytes((np.sin(2 * np.pi * 220 * t) * 9000).astype("<i2"), 16000))
    folders = ReferenceFolders([tmp_path])
    fields = {"text": "Hi.", "ref_audio_path": str(path), "prompt_text": "Yo.",
              "prompt_lang": "en-us", "text_lang": "en-us", "seed": 9}
    call = tts_call(fields, tone, references=folders)
    assert call.request.reference_audio == path.read_bytes()
    assert call.request.prompt_text == "Yo." and call.request.seed == 9
    assert tts_call({**fields, "ref_audio_path": "ref.wav"}, tone,
                    references=folders).request == call.request  # relative to the root
    with pytest.raises(UnsupportedFeature, match="reference_roots"):
        tts_call(fields, tone)  # no reference folders: no path is read
    with pytest.raises(BadReferenceAudio, match="not a readable reference clip"):
        tts_call({**fields, "ref_audio_path": str(tmp_path / "none.wav")}, tone,
                 references=folders)
    with pytest.raises(UnsupportedFeature, match="prompt_lang"):
        tts_call({**fields, "prompt_lang": "zh"}, tone, references=folders)
    with pytest.raises(UnsupportedFeature, match="aux_ref_audio_paths"):
        tts_call({"text": "Hi.", "text_lang": "en", "aux_ref_audio_paths": [str(path)]}, tone)
    with pytest.raises(UnsupportedFeature, match="seed"):
        tts_call({"text": "Hi.", "text_lang": "en", "seed": 4}, cached_piper.engine)


def test_tts_route_delivers_each_media_type(cached_tone) -> None:
    with serve_app(gateway_app(cached_tone)) as gateway:
        hi = {"text": "Hi.", "text_lang": "en"}
        answers = {m: httpx.get(f"{gateway}/tts", params={**hi, "media_type": m}, timeout=60)
                   for m in ("wav", "raw", "ogg")}
        streamed = httpx.get(f"{gateway}/tts", params={**hi, "streaming_mode": "true"}, timeout=60)
        refused = httpx.post(f"{gateway}/tts", json={**hi, "top_k": 3}, timeout=60)
        not_json = httpx.post(f"{gateway}/tts", content=b"text=Hi", timeout=60)
    assert answers["wav"].content.startswith(b"RIFF")
    assert answers["ogg"].content.startswith(b"OggS")
    assert answers["ogg"].headers["content-type"] == "audio/ogg"
    assert [a.headers["X-Cache"] for a in answers.values()] == ["MISS", "HIT", "HIT"]
    assert streamed.content[44:] == answers["wav"].content[44:] == answers["raw"].content
    assert refused.status_code == 400 and "top_k" in refused.json()["message"]
    assert not_json.status_code == 400
    assert len(cached_tone.engine.calls) == 1
