"""Uploaded voices' speaker embeddings, comparisons, privacy and purges, through the HTTP API.

Real parts: the clips are Piper's speech, the encoder is resemblyzer (the
``[embeddings]`` extra; loaded once in this process and shared by every app), the
servers are uvicorn (in this process, so a test can count encoder calls) and one
``voxcache serve`` subprocess on the same folder (the tone engine, which clones,
renders takes from the voices). The purge also runs as the ``voxcache`` CLI.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile
from prometheus_client.parser import text_string_to_metric_families

from voxcache.testing import forked, waiting

pytest.importorskip("resemblyzer", reason="needs the [embeddings] extra")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

PIPER_LINES = (
    "The quick brown fox jumps over the lazy dog while the weather stays fine today.",
    "Another sentence, spoken by the same voice, about trains leaving the station at noon.",
)
KEYS = {"A": "key-of-tenant-a", "B": "key-of-tenant-b"}
TIMEOUT = 120  # a cold encoder (torch, the weights, librosa's kernels) takes seconds


# -- clips ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clips(piper, tmp_path_factory) -> list[bytes]:
    """Two sentences in Piper's joe voice, as plain 16-bit WAV files."""
    from voxcache.cache import Cache
    from voxcache.cached import CachedEngine
    from voxcache.request import SynthesisRequest

    cached = CachedEngine(piper, Cache(tmp_path_factory.mktemp("piper-cache")))
    made = []
    for line in PIPER_LINES:
        audio = cached.synthesize(SynthesisRequest(
            line, params={"noise_scale": 0.0, "noise_w_scale": 0.0})).audio
        made.append(wav(audio.samples().astype(np.float32) / 32768, audio.sample_rate))
    cached.cache.close()
    return made


def wav(samples: np.ndarray, rate: int, fmt: str = "WAV") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=fmt, subtype="PCM_16")
    return out.getvalue()


def resaved(clip: bytes, fmt: str) -> bytes:
    """The same samples in another container (other headers, same sound)."""
    samples, rate = soundfile.read(io.BytesIO(clip), dtype="int16")
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=fmt, subtype="PCM_16")
    assert out.getvalue() != clip
    return out.getvalue()


def pitch_shifted(clip: bytes, tmp: Path) -> bytes:
    """Another voice made from the same speech (sox, +400 cents)."""
    src, dst = tmp / "in.wav", tmp / "shifted.wav"
    src.write_bytes(clip)
    try:
        subprocess.run(["sox", str(src), str(dst), "pitch", "400"], check=True)
    except FileNotFoundError:
        pytest.skip("sox is not installed")
    return dst.read_bytes()


def clip_slices(clip: bytes) -> list[bytes]:
    """Distinctive slices of a clip: its file bytes, and its samples as int16, float32 and
    float64 (what a decoder or an extractor holds), from the middle of the speech."""
    samples, _ = soundfile.read(io.BytesIO(clip), dtype="float32")
    window = samples[len(samples) // 2:len(samples) // 2 + 24]
    return [clip[len(clip) // 2:len(clip) // 2 + 48], (window * 32768).astype("<i2").tobytes(),
            window.astype("<f4").tobytes(), window.astype("<f8").tobytes()]


def folder_holds(folder: Path, needles: list[bytes]) -> list[str]:
    return [f"{path.relative_to(folder)}: slice {i}" for path in folder.rglob("*")
            if path.is_file() for i, needle in enumerate(needles)
            if needle in path.read_bytes()]


# -- HTTP helpers ----------------------------------------------------------------------
def upload(url: str, clip: bytes, headers: dict[str, str] | None = None,
           **form: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/voices", files={"file": ("clip.wav", clip)}, data=form,
                      headers=headers, timeout=TIMEOUT)


def compare(url: str, subject: str, headers: dict[str, str] | None = None,
            **fields: Any) -> httpx.Response:
    """``POST /v1/voices/{subject}/compare`` with form fields (``voice``) or ``file``."""
    files = {"file": ("probe.wav", fields.pop("file"))} if "file" in fields else None
    return httpx.post(f"{url}/v1/voices/{subject}/compare", data=fields, files=files,
                      headers=headers, timeout=TIMEOUT)


def embedding(url: str, voice: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.get(f"{url}/v1/voices/{voice}/embedding", headers=headers, timeout=TIMEOUT)


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def encoder_calls(app: Any) -> int:
    """Times the app's embedding stage really ran the encoder."""
    found = getattr(app.state, "voice_artifacts", None)
    return 0 if found is None else found.embeddings().calls


def answer(response: httpx.Response) -> tuple[int, bytes, dict[str, str]]:
    """What a client can observe of a response (the Date header aside)."""
    headers = {k: v for k, v in response.headers.items() if k.lower() != "date"}
    return response.status_code, response.content, headers


until = partial(waiting.until, bound=10.0)


def stage_counters(cached: Any) -> dict[str, int]:
    return {k: v for k, v in cached.cache.stats()["counters"].items() if k.startswith("stage_")}


def cli(cache_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "voxcache.cli", "--cache-dir", str(cache_dir),
                       "--engine", "tone", *args], capture_output=True, text=True,
                      timeout=120, check=False)


# -- tests -----------------------------------------------------------------------------
def test_upload_derives_the_embedding_once_and_get_returns_it_as_safetensors(
        make_app, live, clips, tmp_path) -> None:
    app, cached = make_app()
    with live(app) as server:
        first = upload(server.url, clips[0], prompt_text=PIPER_LINES[0])
        assert first.status_code == 201, first.text
        voice, status = first.json()["id"], first.json()["embedding_status"]
        assert (status["status"], status["cache"], status["dimensions"]) == ("ready", "miss", 256)
        assert status["revision"].startswith("resemblyzer-")
        assert first.json()["embedding"] == status["key"]
        # the same clip re-saved with other headers: one voice, and no second encode
        for copy in (resaved(clips[0], "FLAC"), resaved(clips[0], "WAVEX"), clips[0]):
            again = upload(server.url, copy, prompt_text=PIPER_LINES[0])
            assert again.status_code == 200 and again.json()["id"] == voice
            assert again.json()["embedding_status"]["cache"] == "hit"
        assert encoder_calls(app) == 1

        got = embedding(server.url, voice)
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/x-safetensors"
        tensors = safetensors_numpy.load(got.content)
        assert set(tensors) == {"embedding"}
        vector = tensors["embedding"]
        assert vector.shape == (256,) and vector.dtype == np.float32
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3  # resemblyzer L2-normalises
        stored = cached.cache.folder.get(status["key"], "embedding")
        assert stored is not None and got.content == bytes(stored.blob)  # the stored entry
        assert httpx.get(f"{server.url}/v1/voices/{voice}/embedding",
                         headers={"If-None-Match": got.headers["etag"]}).status_code == 304
        assert encoder_calls(app) == 1

        # a cache that lost it (purged, evicted, a damaged file quarantined) derives it again
        # from the kept clip: the same vector under the same key
        assert cached.cache.delete(status["key"], "embedding")
        again = embedding(server.url, voice)
        assert again.status_code == 200 and again.headers["x-voxcache-stage-cache"] == "MISS"
        assert again.headers["etag"] == got.headers["etag"]
        assert encoder_calls(app) == 2
        assert np.allclose(safetensors_numpy.load(again.content)["embedding"], vector, atol=1e-5)
        path = cached.cache.folder.path_of(status["key"], "embedding")
        if path.exists():  # stored as its own file: a flipped byte there is refused too
            damaged = bytearray(path.read_bytes())
            damaged[-5] ^= 0x01
            path.write_bytes(bytes(damaged))
            cached.cache.in_process.clear()
            third = embedding(server.url, voice)
            assert third.status_code == 200 and third.content == again.content
            assert third.headers["x-voxcache-stage-cache"] == "MISS"
            assert list((cached.cache.root / "quarantine").iterdir())

        # per kind in /metrics, the same figures in `voxcache stats`
        metrics = httpx.get(f"{server.url}/metrics").text
    exported = {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(metrics) for s in family.samples
                if s.name.startswith("voxcache_stage_")}
    for kind in ("embedding", "prompt", "tokens", "session"):  # every kind, zeros included
        for event in ("hits", "misses", "joins"):
            assert (("voxcache_stage_events_total", (("event", event), ("kind", kind)))
                    in exported)
    def figure(name: str, **labels: str) -> float:
        return exported[(name, tuple(sorted({"kind": "embedding", **labels}.items())))]

    assert figure("voxcache_stage_events_total", event="hits") >= 4  # 3 uploads, 1 GET
    assert figure("voxcache_stage_events_total", event="misses") >= 2
    assert figure("voxcache_stage_bytes_written_total") >= 2 * len(got.content)
    assert figure("voxcache_stage_compute_seconds_total") > 0
    assert figure("voxcache_stage_seconds_saved_total") > 0  # each hit saved an encode
    assert figure("voxcache_stage_events_total", event="hits") == \
        stage_counters(cached)["stage_embedding_hits"]

    stats = cli(cached.cache.root, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    shown = json.loads(stats.stdout)["stages"]["embedding"]
    assert shown["hits"] == figure("voxcache_stage_events_total", event="hits")
    assert shown["misses"] == figure("voxcache_stage_events_total", event="misses")
    assert shown["bytes"] == figure("voxcache_stage_bytes_written_total")
    assert shown["saved_seconds"] == pytest.approx(figure("voxcache_stage_seconds_saved_total"))
    human = cli(cached.cache.root, "stats")
    assert "stage caches" in human.stdout and "embedding" in human.stdout, human.stdout
    assert "stage_embedding_hits" not in human.stdout  # shown per kind, not twice


def test_another_tenants_voice_is_answered_exactly_like_an_absent_one(
        make_app, live, clips) -> None:
    app, cached = make_app(api_keys={KEYS["A"]: "acme", KEYS["B"]: "globex"})
    with live(app) as server:
        a_voice = upload(server.url, clips[0], auth("A"))
        assert a_voice.status_code == 201, a_voice.text
        voice, key = a_voice.json()["id"], a_voice.json()["embedding"]
        b_voice = upload(server.url, clips[1], auth("B")).json()["id"]
        calls, counters = encoder_calls(app), stage_counters(cached)
        cached.cache.folder.flush()
        row_hits = cached.cache.folder.index.rows("key = ?", (key,))[0].hits

        def probes() -> list[tuple[int, bytes, dict[str, str]]]:
            b = auth("B")
            return [answer(r) for r in (
                embedding(server.url, voice, b),
                compare(server.url, voice, b, voice=b_voice),
                compare(server.url, b_voice, b, voice=voice),
                compare(server.url, voice, b, file=clips[1]),
                httpx.get(f"{server.url}/v1/voices/{voice}", headers=b),
                httpx.delete(f"{server.url}/v1/voices/{voice}?purge=true", headers=b, timeout=60),
            )]

        while_stored = probes()
        assert [status for status, _, _ in while_stored] == [404] * 6
        assert all(b"no voice" in body for _, body, _ in while_stored)
        # the probes did no work on A's embedding: no encode, no hit, no miss, no recency
        assert encoder_calls(app) == calls and stage_counters(cached) == counters
        cached.cache.folder.flush()
        assert cached.cache.folder.index.rows("key = ?", (key,))[0].hits == row_hits
        # A's own requests work
        assert embedding(server.url, voice, auth("A")).status_code == 200
        mine = compare(server.url, voice, auth("A"), file=clips[1])
        assert mine.status_code == 200 and mine.json()["same_speaker"] is True

        # the same id once it does not exist at all: the very same answers
        gone = httpx.delete(f"{server.url}/v1/voices/{voice}?purge=true", headers=auth("A"),
                            timeout=60)
        assert gone.status_code == 200, gone.text
        assert probes() == while_stored

        # B uploading the same clip gets its own voice and its own embedding, not A's
        b_same = upload(server.url, clips[0], auth("B"))
        assert b_same.json()["id"] == voice and b_same.json()["embedding"] != key
        assert b_same.json()["embedding_status"]["cache"] == "miss"
        # names that are not voice ids at all
        for name in ("..%2F..%2Fetc", "vc_" + "0" * 24, "alto"):
            assert embedding(server.url, name, auth("B")).status_code == 404


def test_compare_tells_the_same_speaker_from_another(make_app, live, clips, tmp_path) -> None:
    app, _ = make_app(max_upload_seconds=30)
    with live(app) as server:
        joe_a = upload(server.url, clips[0]).json()["id"]
        joe_b = upload(server.url, clips[1]).json()["id"]
        same = compare(server.url, joe_a, voice=joe_b)
        assert same.status_code == 200, same.text
        body = same.json()
        assert body["same_speaker"] is True and body["similarity"] >= body["threshold"] == 0.8
        assert body["against"] == {"voice": joe_b}
        other = compare(server.url, joe_a, file=pitch_shifted(clips[0], tmp_path))
        assert other.status_code == 200, other.text
        assert other.json()["same_speaker"] is False
        assert other.json()["similarity"] < 0.8
        assert set(other.json()["against"]["clip"]) == {"fingerprint", "duration"}
        calls = encoder_calls(app)
        assert compare(server.url, joe_b, voice=joe_a).json()["similarity"] == \
            body["similarity"]  # both embeddings are stored: no encode
        assert encoder_calls(app) == calls

        def refused(response: httpx.Response, status: int, words: str) -> None:
            assert response.status_code == status, response.text
            assert words in response.json()["error"]["message"], response.text

        refused(compare(server.url, joe_a), 400, "not both and not neither")
        refused(compare(server.url, joe_a, voice=joe_b, file=clips[1]), 400, "not both")
        refused(compare(server.url, joe_a, file=b"RIFF not audio at all"), 400, "decoded")
        refused(compare(server.url, joe_a, file=wav(np.zeros(16000, np.float32), 16000)),
                400, "speech")
        refused(compare(server.url, joe_a, voice="vc_" + "1" * 24), 404, "no voice")
        refused(compare(server.url, "alto", voice=joe_a), 404, "built-in")
        refused(compare(server.url, joe_a, file=b"\0" * (11 << 20)), 413, "limit")  # > 10 MB


def test_a_private_upload_leaves_no_clip_bytes_in_the_cache_folder(
        make_app, live, clips, tmp_path) -> None:
    folder = tmp_path / "private"
    app, cached = make_app(cache_dir=folder)
    with live(app) as server:
        private = upload(server.url, clips[0], privacy="true", prompt_text=PIPER_LINES[0])
        assert private.status_code == 201, private.text
        assert private.json()["private"] is True
        assert private.json()["embedding_status"]["status"] == "ready"
        voice = private.json()["id"]
        probe = compare(server.url, voice, file=clips[1])  # a clip measured, never stored
        assert probe.status_code == 200 and probe.json()["same_speaker"] is True
        assert embedding(server.url, voice).status_code == 200
        cached.cache.in_process.clear()
        assert cached.cache.folder.contains(private.json()["embedding"], "embedding")
        assert embedding(server.url, voice).status_code == 200  # what was derived is kept
    cached.cache.close()
    needles = clip_slices(clips[0]) + clip_slices(clips[1])
    assert np.isfinite(np.frombuffer(needles[2], "<f4")).all() and needles[2].strip(b"\0")
    assert folder_holds(folder, needles) == []

    # the search can fail: the same folder, the clip uploaded without privacy, finds it
    app, cached = make_app(cache_dir=folder)
    with live(app) as server:
        assert upload(server.url, clips[1]).status_code == 201
    cached.cache.close()
    assert folder_holds(folder, clip_slices(clips[1]))


def test_purge_by_voice_removes_every_kind_everywhere(make_app, live, serve_proc, clips,
                                                       tmp_path) -> None:
    from voxcache.stages import StageInputs

    folder = tmp_path / "shared"
    app, cached = make_app(cache_dir=folder)
    with live(app) as a, serve_proc(folder, engine="tone") as (b_url, _):
        # a public voice renders a take (and its flac delivery), then turns private: the
        # clip goes, the take and the embedding stay
        public = upload(a.url, clips[0])
        voice = public.json()["id"]
        take = httpx.post(f"{a.url}/v1/audio/speech", timeout=TIMEOUT, json={
            "input": "A take in the uploaded voice.", "voice": voice, "response_format": "flac"})
        assert take.status_code == 200, take.text
        audio_key = take.headers["x-cache-key"]
        assert httpx.delete(f"{a.url}/v1/voices/{voice}", timeout=60).status_code == 204
        private = upload(a.url, clips[0], privacy="true")
        assert private.json()["private"] is True
        assert private.json()["embedding_status"]["cache"] == "hit"
        fingerprint = app.state.voices.get("default", voice).fingerprint
        # an engine's prompt and token take from the clip, a session in this process's
        # memory, and what must survive: another tenant's embedding of the same clip, and
        # a take in an engine voice
        stages = app.state.voice_artifacts.stages
        prompt = stages.put(StageInputs("prompt", "cosyvoice.frontend_zero_shot", "r1",
                                        fingerprint, prompt_text="The quick brown fox."),
                            {"speech_token": np.arange(50, dtype=np.int32)})
        tokens = stages.put(StageInputs("tokens", "tiny-decoder", "r1", fingerprint,
                                        params={"segment": "hello"}), np.arange(9))
        session = stages.put(StageInputs("session", "tiny-decoder", "r1", fingerprint,
                                         params={"session": "s1"}), np.zeros(16))
        kept = stages.put(StageInputs("embedding", "resemblyzer", "r1", fingerprint,
                                      tenant="other"), np.ones(256, np.float32))
        plain = httpx.post(f"{a.url}/v1/audio/speech", json={"input": "An engine voice."},
                           timeout=60)
        plain_key = plain.headers["x-cache-key"]
        # the other process holds the take and the embedding in its memory
        assert httpx.get(f"{b_url}/v1/audio/{audio_key}", timeout=60).status_code == 200
        assert embedding(b_url, voice).status_code == 200

        dry = cli(folder, "purge", "--voice", voice, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert report["by_kind"] == {"audio": 1, "embedding": 1, "encoded": 1, "prompt": 1,
                                     "tokens": 1}
        assert report["deleted"] == 0 and report["voice"]["uploaded"][0]["tenant"] == "default"
        listed = {(e["key"], e["kind"]) for e in report["entries"]}
        human = cli(folder, "purge", "--voice", voice, "--dry-run")
        assert "by kind: audio 1, embedding 1, encoded 1, prompt 1, tokens 1" in human.stdout
        assert "nothing was deleted" in human.stdout
        assert httpx.get(f"{b_url}/v1/audio/{audio_key}", timeout=60).status_code == 200

        done = cli(folder, "purge", "--voice", voice, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["deleted"] == 5
        assert {(audio_key, "audio"), (prompt.key, "prompt"), (tokens.key, "tokens"),
                (private.json()["embedding"], "embedding")} < listed
        index = cached.cache.folder.index
        assert index.rows("tenant = 'default' AND voice = ?", (fingerprint[:16],)) == []
        assert index.rows("parent = ?", (audio_key,)) == []
        for key, kind in listed:  # the flac delivery too
            assert not cached.cache.folder.contains(key, kind), kind
        # here: the session (memory only) went through the voice anchor
        assert until(lambda: not cached.cache.in_process.contains(session.key, "session"))
        # there: the other process's memory let go of the take and the embedding
        assert until(lambda: httpx.get(f"{b_url}/v1/audio/{audio_key}").status_code == 404)
        dropped = until(lambda: (r := embedding(b_url, voice)).status_code == 409 and r)
        assert dropped and "upload the clip again" in dropped.json()["error"]["message"]
        # what was not derived from this tenant's clip stays; the voice record stays
        assert cached.cache.folder.contains(kept.key, "embedding")
        assert httpx.get(f"{a.url}/v1/audio/{plain_key}", timeout=60).status_code == 200
        assert httpx.get(f"{a.url}/v1/voices/{voice}").json()["embedding"] is None

        # DELETE ?purge=true: the voice and all it derived, here and in the other process
        second = upload(a.url, clips[1])
        other = second.json()["id"]
        take = httpx.post(f"{a.url}/v1/audio/speech", timeout=TIMEOUT, json={
            "input": "Another take.", "voice": other, "response_format": "wav"})
        second_key = take.headers["x-cache-key"]
        second_print = app.state.voices.get("default", other).fingerprint
        session = stages.put(StageInputs("session", "tiny-decoder", "r1", second_print,
                                         params={"session": "s2"}), np.zeros(16))
        assert httpx.get(f"{b_url}/v1/audio/{second_key}", timeout=60).status_code == 200
        purged = httpx.delete(f"{a.url}/v1/voices/{other}", params={"purge": "true"}, timeout=60)
        assert purged.status_code == 200, purged.text
        assert purged.json()["purged"] == {"audio": 1, "embedding": 1, "session": 1}
        assert not cached.cache.in_process.contains(session.key, "session")
        assert index.rows("voice = ?", (second_print[:16],)) == []
        assert until(lambda: httpx.get(f"{b_url}/v1/audio/{second_key}").status_code == 404)
        assert httpx.get(f"{a.url}/v1/voices/{other}").status_code == 404
        assert httpx.get(f"{a.url}/v1/audio/{plain_key}", timeout=60).status_code == 200


def test_purge_by_voice_id_keeps_to_the_tenant_named(clips, tmp_path) -> None:
    from voxcache.cache import Cache
    from voxcache.service.voices import VoiceStore
    from voxcache.stages import StageCache, StageInputs

    folder = tmp_path / "cache"
    store = VoiceStore(folder / "voices", 60)
    acme, _ = store.add("acme", clips[0], None, None, False)
    globex, _ = store.add("globex", clips[0], None, None, True)
    assert acme.id == globex.id  # one clip, one id, two folders
    cache = Cache(folder)
    stages = StageCache(cache)
    made = {tenant: stages.put(StageInputs("embedding", "resemblyzer", "r1", acme.fingerprint,
                                           tenant=tenant), np.ones(256, np.float32)).key
            for tenant in ("acme", "globex")}
    cache.close()

    both = json.loads(cli(folder, "purge", "--voice", acme.id, "--dry-run", "--json").stdout)
    assert [v["tenant"] for v in both["voice"]["uploaded"]] == ["acme", "globex"]
    assert {e["key"] for e in both["entries"]} == set(made.values())
    one = cli(folder, "purge", "--voice", acme.id, "--tenant", "globex", "--json")
    assert one.returncode == 0, one.stdout
    assert [e["key"] for e in json.loads(one.stdout)["entries"]] == [made["globex"]]
    cache = Cache(folder)
    try:
        assert cache.folder.contains(made["acme"], "embedding")
        assert not cache.folder.contains(made["globex"], "embedding")
    finally:
        cache.close()


def test_purge_names_what_it_cannot_find(make_app, tmp_path) -> None:
    folder = tmp_path / "cache"
    _, cached = make_app(cache_dir=folder)
    cached.cache.close()
    unknown = cli(folder, "purge", "--voice", "vc_" + "a" * 24, "--json")
    assert unknown.returncode == 1 and "no uploaded voice" in unknown.stdout, unknown.stdout
    malformed = cli(folder, "purge", "--voice", "vc_../../etc", "--json")
    assert malformed.returncode == 2 and "not an uploaded voice id" in malformed.stdout


def test_without_the_extra_the_upload_still_succeeds_and_says_why(
        make_app, live, clips, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "resemblyzer", None)  # what a missing extra looks like
    app, _ = make_app()
    with live(app) as server:
        response = upload(server.url, clips[0])
        assert response.status_code == 201, response.text
        status = response.json()["embedding_status"]
        assert status["status"] == "unavailable"
        assert status["install"] == "pip install 'voxcache[embeddings]'"
        assert "[embeddings] extra" in status["reason"]
        assert response.json()["embedding"] is None
        voice = response.json()["id"]
        missing = embedding(server.url, voice)
        assert missing.status_code == 503
        assert "pip install 'voxcache[embeddings]'" in missing.json()["error"]["message"]
        assert httpx.post(f"{server.url}/v1/audio/speech", json={
            "input": "Still a voice.", "voice": voice}, timeout=60).status_code == 200


def test_an_encode_waits_for_a_render_slot_and_a_known_clip_never_does(
        make_app, live, clips, gated_tone) -> None:
    app, cached = make_app(engine=gated_tone, render_concurrency=1, render_queue=0)
    with live(app) as server:
        known = upload(server.url, clips[0])
        assert known.json()["embedding_status"]["cache"] == "miss"
        gated_tone.gate.clear()
        holder = threading.Thread(target=lambda: httpx.post(
            f"{server.url}/v1/audio/speech", json={"input": "Holding the slot."},
            timeout=TIMEOUT))
        holder.start()
        try:
            assert until(lambda: app.state.server.admission.running == 1)
            busy = upload(server.url, clips[1])  # a new clip needs the encoder: no slot free
            assert busy.status_code == 503 and "retry-after" in busy.headers, busy.text
            stored = app.state.voices.list("default")
            assert len(stored) == 2 and {v.embedding for v in stored} == {
                None, known.json()["embedding"]}  # the voice is kept, without an embedding
            again = upload(server.url, clips[0])  # a known clip: a hit, no slot needed
            assert again.status_code == 200 and again.json()["embedding_status"]["cache"] == "hit"
        finally:
            gated_tone.gate.set()
            holder.join(timeout=30)
        retried = upload(server.url, clips[1])
        assert retried.status_code == 200, retried.text
        assert retried.json()["embedding_status"]["status"] == "ready"
        assert encoder_calls(app) == 2
