"""GPT-SoVITS api_v2 as an upstream: parameters, content-keyed references, errors, streaming.

Reference clips are read through the operator's reference folders (here ``ref_dir``, which
the stand-in upstream also mounts); the attacks on those folders are in
test_reference_paths.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.audio import Audio
from voxcache.errors import BadReferenceAudio, InvalidParameter, UnsupportedFeature, UpstreamError
from voxcache.protocols.gpt_sovits.fields import reference_params
from voxcache.references import ReferenceFolders
from voxcache.upstream import load_upstream

from .conftest import gateway_app
from .servers import serve_app
from .standins import GSV_RATE, gpt_sovits_app, wav_bytes


def clip(path: Path, pitch: float) -> Path:
    t = np.arange(16000) / 16000
    path.write_bytes(wav_bytes((0.3 * np.sin(2 * np.pi * pitch * t) * 32767).astype("<i2"),
                               16000))
    return path


@pytest.fixture
def upstream(ref_dir: Path):
    """A stand-in api_v2 server whose working folder is ``ref_dir``."""
    app = gpt_sovits_app(ref_dir)
    with serve_app(app) as url:
        yield url, app.state.calls


def gsv(url: str, root: Path, cache: Cache, **options) -> CachedEngine:
    """The gateway with ``root`` as its one reference folder."""
    return CachedEngine(load_upstream(f"gpt-sovits={url}", references=ReferenceFolders([root]),
                                      **options), cache)


def request(cached: CachedEngine, path: str, text: str = "Hello world.",
            **params) -> SynthesisRequest:
    refs = reference_params(cached.engine.references, path)
    return SynthesisRequest(text, language="en", params={**refs, **params})


def test_sends_api_v2_fields_with_api_v2_defaults(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    cached = gsv(url, ref_dir, cache)
    result = cached.synthesize(SynthesisRequest(
        "Hello world.", language="all_zh", seed=42, speed=1.25,
        params={**reference_params(cached.engine.references, "a.wav"), "prompt_text": "Hi."}))
    sent = calls[-1]
    assert sent["text"] == "Hello world." and sent["text_lang"] == "all_zh"
    assert sent["ref_audio_path"] == str(ref_dir / "a.wav")  # the root as the upstream sees it
    assert sent["prompt_lang"] == "all_zh"
    assert (sent["seed"], sent["speed_factor"], sent["media_type"]) == (42, 1.25, "wav")
    assert (sent["top_k"], sent["top_p"], sent["temperature"]) == (15, 1.0, 1.0)
    assert (sent["text_split_method"], sent["repetition_penalty"]) == ("cut5", 1.35)
    assert (sent["batch_size"], sent["fragment_interval"], sent["sample_steps"]) == (1, 0.3, 32)
    assert sent["split_bucket"] is True and sent["super_sampling"] is False
    assert result.audio.sample_rate == GSV_RATE


def test_same_content_at_two_paths_is_one_key(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    shutil.copy(ref_dir / "a.wav", ref_dir / "copy.wav")
    cached = gsv(url, ref_dir, cache)
    first = cached.synthesize(request(cached, str(ref_dir / "a.wav")))
    second = cached.synthesize(request(cached, "copy.wav"))
    assert second.cache == "hit" and second.key == first.key
    assert len(calls) == 1


def test_changed_content_at_one_path_is_a_new_key(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    path = clip(ref_dir / "voice.wav", 300)
    cached = gsv(url, ref_dir, cache)
    first = cached.synthesize(request(cached, str(path)))
    clip(path, 450)  # the operator replaces the clip in place
    second = cached.synthesize(request(cached, str(path)))
    assert second.cache == "miss" and second.key != first.key
    assert second.audio != first.audio
    assert len(calls) == 2


def test_a_path_the_gateway_cannot_read_is_refused_never_keyed_by_its_string(
        upstream, ref_dir, cache) -> None:
    """Keying by the path string served the old voice once the file changed: it is gone."""
    url, calls = upstream
    clip(ref_dir / "remote.wav", 300)
    blind = CachedEngine(load_upstream(f"gpt-sovits={url}"), cache)  # no reference folders
    with pytest.raises(UnsupportedFeature, match="reference_roots"):
        reference_params(blind.engine.references, "remote.wav")
    forged = {"ref_audio_path": "remote.wav", "ref_audio_id": "path:remote.wav"}
    with pytest.raises(UnsupportedFeature, match="reference_roots"):
        blind.synthesize(SynthesisRequest("Hi.", params=forged))
    cached = gsv(url, ref_dir, cache)
    with pytest.raises(BadReferenceAudio, match="not a readable reference clip"):
        reference_params(cached.engine.references, "elsewhere.wav")
    with pytest.raises(InvalidParameter, match="does not match"):
        cached.synthesize(SynthesisRequest("Hi.", params=forged))  # a path id is never valid
    assert calls == []


def test_upstream_sees_the_root_where_it_mounts_it(ref_dir, cache) -> None:
    """``ref_root_upstream``: the stand-in's working folder is the root's parent, so it is
    sent ``refs/…``; a tenant's file keeps its tenant folder in that path."""
    clip(ref_dir / "a.wav", 300)
    app = gpt_sovits_app(ref_dir.parent)
    with serve_app(app) as url:
        cached = gsv(url, ref_dir, cache, ref_root_upstream=ref_dir.name)
        result = cached.synthesize(request(cached, "a.wav"))
    assert app.state.calls[-1]["ref_audio_path"] == f"{ref_dir.name}/a.wav"
    assert result.cache == "miss"
    with pytest.raises(InvalidParameter, match="one upstream folder per reference root"):
        load_upstream("gpt-sovits=http://127.0.0.1:9", ref_root_upstream=["/a", "/b"],
                      references=ReferenceFolders([ref_dir]))


def test_a_clip_only_the_upstream_decodes_is_keyed_by_its_bytes(ref_dir) -> None:
    folders = ReferenceFolders([ref_dir])
    (ref_dir / "a.m4a").write_bytes(b"not something libsndfile reads")
    first = reference_params(folders, "a.m4a")["ref_audio_id"]
    (ref_dir / "a.m4a").write_bytes(b"another clip in that format")
    assert first.startswith("bytes:")
    assert reference_params(folders, "a.m4a")["ref_audio_id"] != first


def test_aux_references_are_a_set_of_contents(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    main, b, c = (clip(ref_dir / f"{n}.wav", p) for n, p in (("m", 300), ("b", 500), ("c", 700)))
    cached = gsv(url, ref_dir, cache)
    folders = cached.engine.references
    one = reference_params(folders, str(main), [str(b), str(c)])
    other_order = reference_params(folders, str(main), ["c.wav", "b.wav"])
    first = cached.synthesize(SynthesisRequest("Hi.", params=one))
    second = cached.synthesize(SynthesisRequest("Hi.", params=other_order))
    assert second.cache == "hit" and len(calls) == 1
    assert calls[0]["aux_ref_audio_paths"] == [str(b), str(c)]
    assert first.key == second.key


def test_a_stale_reference_id_is_refused_before_rendering(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    path = clip(ref_dir / "v.wav", 300)
    cached = gsv(url, ref_dir, cache)
    params = reference_params(cached.engine.references, str(path))
    clip(path, 600)  # changed after the id was computed
    with pytest.raises(InvalidParameter, match="does not match") as caught:
        cached.synthesize(SynthesisRequest("Hi.", params=params))
    assert not re.search(r"[0-9a-f]{16}", str(caught.value))  # names no hash of the file
    with pytest.raises(InvalidParameter, match="JSON list"):
        cached.synthesize(SynthesisRequest("Hi.", params={**params,
                                                          "aux_ref_audio_paths": "a.wav"}))
    assert calls == []


def test_upstream_identity_is_in_the_key(ref_dir, cache) -> None:
    clip(ref_dir / "a.wav", 300)
    with serve_app(gpt_sovits_app(ref_dir)) as one, serve_app(gpt_sovits_app(ref_dir)) as two:
        engines = [gsv(url, ref_dir, cache, **opts)
                   for url, opts in ((one, {}), (two, {}), (one, {"revision": "v4"}))]
        keys = {e.synthesize(request(e, str(ref_dir / "a.wav"))).key for e in engines}
    assert len(keys) == 3


def test_upstream_errors_carry_status_and_message(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    # the gateway reads the clip, but the upstream mounts the root somewhere it cannot open
    cached = gsv(url, ref_dir, cache, ref_root_upstream="/nowhere-on-the-upstream")
    with pytest.raises(UpstreamError) as caught:
        cached.synthesize(request(cached, "a.wav"))
    assert caught.value.upstream_status == 400
    assert "not exists" in str(caught.value)  # the clip is loaded before /tts: it fails there
    assert calls == []  # a 4xx answer is never retried, and /tts is not asked


def test_streaming_mode_answers_are_decoded(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    path = clip(ref_dir / "a.wav", 300)
    cached = gsv(url, ref_dir, cache)
    whole = cached.synthesize(request(cached, str(path)))
    streamed = cached.synthesize(request(cached, str(path), streaming_mode=2))
    assert streamed.key != whole.key and calls[-1]["streaming_mode"] == 2
    assert streamed.audio == whole.audio  # the stand-in renders the same tone both ways


def test_uploaded_clip_is_staged_in_ref_dir(upstream, ref_dir, cache, tmp_path) -> None:
    url, calls = upstream
    data = clip(ref_dir / "src.wav", 300).read_bytes()
    with pytest.raises(InvalidParameter, match="inside a reference root"):
        gsv(url, ref_dir, cache, ref_dir=str(ref_dir / "staged"))  # tenants could read it by path
    cached = gsv(url, ref_dir, cache, ref_dir=str(tmp_path / "staged"))
    assert cached.engine.supports_reference
    result = cached.synthesize(SynthesisRequest("Hi.", reference_audio=data, prompt_text="Yo."))
    sent = calls[-1]
    assert sent["ref_audio_path"].startswith(str(tmp_path / "staged"))
    assert Path(sent["ref_audio_path"]).read_bytes() == data
    assert sent["prompt_text"] == "Yo." and isinstance(result.audio, Audio)


def test_tts_route_round_trip(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    app = gateway_app(gsv(url, ref_dir, cache))
    with serve_app(app) as gateway:
        body = {"text": "Hello.", "text_lang": "EN", "ref_audio_path": "a.wav",
                "prompt_lang": "en", "top_k": 5, "media_type": "raw"}
        first = httpx.post(f"{gateway}/tts", json=body, timeout=30)
        query = {**body, "text_lang": "en", "top_k": "5"}
        second = httpx.get(f"{gateway}/tts", params=query, timeout=30)
        bad = httpx.get(f"{gateway}/tts", params={**query, "text_split_method": "cut9"}, timeout=60)
        missing = httpx.get(f"{gateway}/tts", params={**query, "ref_audio_path": "nope.wav"},
                            timeout=60)
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "audio/raw"
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("MISS", "HIT")
    assert second.content == first.content and len(first.content) % 2 == 0
    assert calls[0]["top_k"] == 5 and calls[0]["prompt_lang"] == "en"
    assert bad.status_code == 400 and "text_split_method" in bad.json()["message"]
    assert missing.status_code == 400  # refused by the gateway: the upstream never asked
    assert "not a readable reference clip" in missing.json()["message"] and len(calls) == 1
