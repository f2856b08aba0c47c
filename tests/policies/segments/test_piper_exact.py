"""Exactness with real Piper: a paragraph stitched from other requests' sentences equals
rendering the whole text at once, sample for sample (zero noise, fixed thread count)."""

from __future__ import annotations

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.request import SynthesisRequest

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}


def whole_render(piper, text: str) -> bytes:
    """Piper's own synthesis of the whole text, uncached: what synthesize_wav writes."""
    from piper.config import SynthesisConfig

    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    return b"".join(c.audio_int16_bytes for c in piper.voice.synthesize(text, config))


def test_stitched_paragraph_is_sample_identical(piper, cache: Cache) -> None:
    seg = CachedEngine(piper, cache, segments=True)
    seg.synthesize(SynthesisRequest("Welcome to the station. The next train departs at noon.",
                                    params=DETERMINISTIC))
    seg.synthesize(SynthesisRequest("Dr. Smith is waiting at gate 5. Please mind the gap!",
                                    params=DETERMINISTIC))
    text = ("Please mind the gap! Welcome to the station. Dr. Smith is waiting at gate 5. "
            "Tickets are sold at the counter.")
    result = seg.synthesize(SynthesisRequest(text, params=DETERMINISTIC))
    # espeak ends a sentence after "Dr.", and so does the recovered split.
    assert piper.split_sentences(text) == [
        "Please mind the gap!", "Welcome to the station.", "Dr.",
        "Smith is waiting at gate 5.", "Tickets are sold at the counter."]
    assert (result.cache, result.segments_hit, result.segments_rendered) == ("partial", 4, 1)
    assert result.audio.pcm == whole_render(piper, text)


def test_unverifiable_split_keeps_the_request_whole(piper, cache: Cache) -> None:
    seg = CachedEngine(piper, cache, segments=True)
    text = "Say [[ h ə l ˈoʊ ]] now. And again."
    assert piper.split_sentences(text) is None
    result = seg.synthesize(SynthesisRequest(text, params=DETERMINISTIC))
    assert result.cache == "miss" and result.segments_rendered == 0
