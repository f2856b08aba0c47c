"""``/tts`` with ``streaming_mode`` through the gateway, written from api_v2's source: its
streamed WAV is the header ``wave`` writes for zero frames, then raw PCM as the model yields
it; raw is PCM; ogg is one file per chunk. A miss reaches the client while the upstream is
still speaking, a joiner follows live, a torn upstream stream stores nothing and cuts the
client off. And every delivered WAV is the plain 44-byte-header file api_v2 sends."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from voxcache import Cache, CachedEngine
from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

from .api_v2_setup import body, gateway, pcm_of, receive, standin
from .servers import serve_app
from .standins import GSV_RATE, GSV_TEAR_TEXT

STREAMED_HEADER = (b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x00}\x00\x00"
                   b"\x00\xfa\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")
"""What Python's ``wave`` module writes for a 32 kHz mono 16-bit file of zero frames."""


def test_a_miss_streams_while_the_upstream_is_still_speaking(tmp_path) -> None:
    """Chunks come 1 s apart (the last at 3 s): the first byte through the gateway must
    arrive well before the upstream sends its last chunk, not after the whole take."""
    with standin(tmp_path, interval=1.0) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        miss = receive(address, body(streaming_mode=2))
        direct = receive(url, body(streaming_mode=2))
        hit = receive(address, body(streaming_mode=2))
    assert miss.status == 200 and miss.error is None, miss.content[:200]
    assert miss.headers["X-Cache"] == "MISS" and miss.headers["content-type"] == "audio/wav"
    last_chunk_sent = upstream.sent_at[0][-1]
    assert miss.first_byte is not None and miss.first_byte < last_chunk_sent
    # live: the first chunk reached the client before the upstream sent its second (not a
    # bound from the request: under four test workers the upstream began 1.1 s late)
    assert miss.first_byte < upstream.sent_at[0][1]
    assert miss.content[:44] == STREAMED_HEADER == direct.content[:44]
    assert miss.content == direct.content  # exactly what api_v2 sends
    assert hit.headers["X-Cache"] == "HIT" and hit.content == miss.content
    assert len(upstream.calls) == 2  # the miss and the direct call; the hit did not ask


def test_joiners_of_the_same_key_follow_live(tmp_path) -> None:
    with standin(tmp_path, interval=1.0) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        results: dict[str, object] = {}
        leader = threading.Thread(target=lambda: results.update(
            leader=receive(address, body(streaming_mode=3))))
        leader.start()
        deadline = time.monotonic() + 10
        while not upstream.sent_at or not upstream.sent_at[0]:  # the first chunk is out
            assert time.monotonic() < deadline
            time.sleep(0.01)
        joiner = receive(address, body(streaming_mode=3))
        leader.join(30)
    first = results["leader"]
    assert joiner.headers["X-Cache"] == "JOINED"
    assert joiner.first_byte is not None and joiner.first_byte < upstream.sent_at[0][-1]
    assert joiner.content == first.content  # type: ignore[attr-defined]
    assert len(upstream.calls) == 1


def test_a_torn_upstream_stream_stores_nothing_and_cuts_the_client_off(tmp_path) -> None:
    with standin(tmp_path, interval=0.2) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        torn = receive(address, body(text=GSV_TEAR_TEXT, streaming_mode=1))
        again = receive(address, body(text=GSV_TEAR_TEXT, streaming_mode=1))
    assert torn.status == 200 and torn.content.startswith(STREAMED_HEADER)
    assert len(torn.content) > 44  # the first chunk got through before the upstream failed
    assert isinstance(torn.error, httpx.RemoteProtocolError)  # cut off, never ended cleanly
    assert again.headers["X-Cache"] == "MISS" and isinstance(again.error, httpx.HTTPError)
    assert len(upstream.calls) == 2  # nothing of the torn take was stored


@pytest.mark.parametrize("streaming", [False, True])
def test_a_client_dropping_44_bytes_gets_exactly_the_pcm(tmp_path, streaming) -> None:
    """api_v2 clients commonly play bytes 44.. of a wav as PCM: no private chunk may sit
    between the header and the samples (the stored file keeps its envelope)."""
    fields = body(streaming_mode=2 if streaming else 0)
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        direct = httpx.post(f"{url}/tts", json=fields, timeout=30)
        miss = httpx.post(f"{address}/tts", json=fields, timeout=30)
        hit = httpx.post(f"{address}/tts", json=fields, timeout=30)
        raw = httpx.post(f"{address}/tts", json={**fields, "media_type": "raw"}, timeout=30)
        stored = Cache(tmp_path / "cache").get(miss.headers["X-Cache-Key"])
    assert (miss.headers["X-Cache"], hit.headers["X-Cache"]) == ("MISS", "HIT")
    assert pcm_of(miss.content) == pcm_of(hit.content) == pcm_of(direct.content)
    assert pcm_of(miss.content) == raw.content == bytes(stored[0].payload)  # type: ignore[index]
    assert b"vxch" in stored[0].blob and b"vxch" not in miss.content  # type: ignore[index]
    if not streaming:  # sf.write's header: the sizes are the file's own
        assert miss.content == direct.content


@pytest.mark.piper
@pytest.mark.parametrize("streaming", ["0", "true"])
def test_piper_end_to_end_44_byte_client(piper, tmp_path, streaming) -> None:
    """Embedded Piper behind ``/tts``: the client's bytes 44.. are the stored take's PCM."""
    settings = Settings(cache_dir=tmp_path / "cache")
    cached = CachedEngine(piper, Cache(settings.cache_dir, settings.cache_config()))
    query = {"text": "Doors closing. Please stand clear.", "text_lang": "en",
             "streaming_mode": streaming}
    with serve_app(create_app(settings, options=ServiceOptions(), cached=cached)) as url:
        miss = httpx.get(f"{url}/tts", params=query, timeout=60)
        hit = httpx.get(f"{url}/tts", params=query, timeout=60)
    stored = cached.cache.get(miss.headers["X-Cache-Key"])
    cached.cache.close()
    assert miss.status_code == 200, miss.text
    assert (miss.headers["X-Cache"], hit.headers["X-Cache"]) == ("MISS", "HIT")
    assert pcm_of(miss.content) == pcm_of(hit.content) == bytes(stored[0].payload)
    header = np.frombuffer(miss.content[:44], dtype="<u4")
    assert miss.content[:4] == b"RIFF" and header[6] == piper.sample_rate


def test_raw_streams_pcm_and_ogg_is_one_file_per_chunk(tmp_path) -> None:
    with standin(tmp_path, interval=0.3) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        raw = receive(address, body(streaming_mode=1, media_type="raw"))
        ogg = receive(address, body(streaming_mode=1, media_type="ogg", text="Gate three."))
        ogg_hit = receive(address, body(streaming_mode=1, media_type="ogg", text="Gate three."))
    assert raw.headers["content-type"] == "audio/raw"
    assert len(raw.content) == 2 * int(GSV_RATE * upstream.CHUNK_SECONDS * upstream.chunks)
    assert ogg.headers["content-type"] == "audio/ogg"
    assert _ogg_streams(ogg.content) == upstream.chunks  # packed chunk by chunk, as api_v2 does
    assert _ogg_streams(ogg_hit.content) == 1  # a hit is one chunk


def _ogg_streams(data: bytes) -> int:
    """Logical Ogg streams in a body: pages flagged beginning-of-stream."""
    count, at = 0, data.find(b"OggS")
    while at != -1:
        count += data[at + 5] & 0x02 != 0
        at = data.find(b"OggS", at + 4)
    return count
