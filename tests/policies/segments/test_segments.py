"""Segment mode: a paragraph reuses the sentences the cache has already heard."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.errors import UnsupportedFeature
from voxcache.request import ResolvedRequest, SynthesisRequest


@pytest.fixture
def seg(tone: ToneEngine, cache: Cache) -> CachedEngine:
    return CachedEngine(tone, cache, segments=True)


def test_third_sentence_alone_reaches_the_engine(seg: CachedEngine, tone: ToneEngine) -> None:
    seg.synthesize(SynthesisRequest("Welcome to the shop. Today's special is braised pork."))
    seg.synthesize(SynthesisRequest("Please scan the code to order. Thank you."))
    tone.calls.clear()
    result = seg.synthesize(SynthesisRequest(
        "Welcome to the shop. Please scan the code to order. Mind the step."))
    assert tone.calls == ["Mind the step."]
    assert (result.cache, result.segments_hit, result.segments_rendered) == ("partial", 2, 1)
    again = seg.synthesize(SynthesisRequest(
        "Welcome to the shop. Please scan the code to order. Mind the step."))
    assert again.cache == "hit" and tone.calls == ["Mind the step."]
    assert again.wav == result.wav


def test_stitched_audio_equals_whole_render(seg: CachedEngine, tone: ToneEngine,
                                            tmp_path) -> None:
    seg.synthesize(SynthesisRequest("Alpha one. Bravo two."))
    seg.synthesize(SynthesisRequest("Charlie three."))
    stitched = seg.synthesize(SynthesisRequest("Charlie three. Alpha one. Delta four."))
    whole = CachedEngine(ToneEngine(), Cache(tmp_path / "other")).synthesize(
        SynthesisRequest("Charlie three. Alpha one. Delta four."))
    assert stitched.cache == "partial"
    assert stitched.audio.pcm == whole.audio.pcm


def test_several_missing_sentences_go_in_one_call(seg: CachedEngine, tone: ToneEngine) -> None:
    seg.synthesize(SynthesisRequest("Known one."))
    tone.calls.clear()
    result = seg.synthesize(SynthesisRequest("New a. Known one. New b. New c."))
    assert tone.calls == ["New a. New b. New c."]
    assert (result.segments_hit, result.segments_rendered) == (1, 3)


def test_a_one_sentence_request_is_its_own_segment(seg: CachedEngine, tone: ToneEngine) -> None:
    seg.synthesize(SynthesisRequest("First part. Second part."))
    tone.calls.clear()
    result = seg.synthesize(SynthesisRequest("Second part."))
    assert result.cache == "hit" and tone.calls == []


def test_parameters_separate_segments(seg: CachedEngine, tone: ToneEngine) -> None:
    seg.synthesize(SynthesisRequest("Same words. Here too."))
    tone.calls.clear()
    result = seg.synthesize(SynthesisRequest("Same words. Here too.", params={"pitch": 2.0}))
    assert result.cache == "miss" and tone.calls == ["Same words. Here too."]
    result = seg.synthesize(SynthesisRequest("Same words. Other.", voice="bass"))
    assert result.cache == "miss"


def test_concurrent_paragraphs_render_a_shared_sentence_once(cache: Cache) -> None:
    engine = ToneEngine()
    seg = CachedEngine(engine, cache, segments=True)
    texts = [f"Shared new sentence. Own sentence {i}." for i in range(6)]
    barrier = threading.Barrier(len(texts))
    results = []

    def ask(text: str) -> None:
        barrier.wait()
        results.append(seg.synthesize(SynthesisRequest(text, params={"delay": 0.05})))

    threads = [threading.Thread(target=ask, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rendered = [c for call in engine.calls for c in call.split(". ")]
    assert sum("Shared new sentence" in c for c in rendered) == 1
    assert len(results) == 6


class NeighbourEngine(ToneEngine):
    """Declares that its sentences depend on their neighbours."""

    id = "neighbour"
    segments_context_free = False


class DeclaredNeighbourEngine(NeighbourEngine):
    def segment_context(self, segments: list[str], index: int) -> dict[str, object] | None:
        return {"previous": segments[index - 1] if index else None}

    def render(self, request: ResolvedRequest) -> Iterator:
        return super().render(request)


def test_context_dependent_engine_without_context_is_refused(cache: Cache) -> None:
    with pytest.raises(UnsupportedFeature, match="does not declare that context"):
        CachedEngine(NeighbourEngine(), cache, segments=True)


def test_declared_context_is_in_the_segment_key(cache: Cache) -> None:
    engine = DeclaredNeighbourEngine()
    seg = CachedEngine(engine, cache, segments=True)
    seg.synthesize(SynthesisRequest("One. Two."))
    result = seg.synthesize(SynthesisRequest("Zero. Two."))  # "Two." follows another sentence
    assert result.cache == "miss"
    result = seg.synthesize(SynthesisRequest("One. Two. Three."))
    assert (result.segments_hit, result.segments_rendered) == (2, 1)


def test_explain_lists_segments(seg: CachedEngine) -> None:
    info = seg.explain(SynthesisRequest("One here. Two there."))
    assert [s["text"] for s in info["segments"]] == ["One here.", "Two there."]
    assert info["seed_policy"]["policy"] == "pin"


def test_an_engine_whose_splitter_fails_is_an_engine_error_not_a_crash(cache) -> None:
    """Piper's splitter is espeak: whatever it raises is the engine failing (a 502 with its
    reason), never an uncaught exception (a 500)."""
    from voxcache.errors import EngineError

    class Splitless(ToneEngine):
        def split_sentences(self, text: str) -> list[str] | None:
            raise ValueError("embedded null character")

    cached = CachedEngine(Splitless(), cache, segments=True)
    with pytest.raises(EngineError, match="could not split"):
        cached.synthesize(SynthesisRequest("One. Two."))
