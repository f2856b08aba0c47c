"""A Japanese paragraph through segment mode: its sentences are keyed, stored and reused."""

from __future__ import annotations

from pathlib import Path

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest

FIRST = "いらっしゃいませ。本日のおすすめは豚の角煮です！お会計は１，２５０円です。"
SECOND = "いらっしゃいませ。お会計は１，２５０円です。またお越しください。"


def test_a_new_paragraph_renders_only_its_new_sentence(cache: Cache, tmp_path: Path) -> None:
    tone = ToneEngine()
    seg = CachedEngine(tone, cache, segments=True)
    first = seg.synthesize(SynthesisRequest(FIRST, language="ja"))
    assert (first.cache, first.segments_hit, first.segments_rendered) == ("miss", 0, 3)
    # three sentences, one engine call (segment mode joins the missing ones with a space)
    assert tone.calls == [
        "いらっしゃいませ。 本日のおすすめは豚の角煮です！ お会計は１，２５０円です。"]

    tone.calls.clear()
    second = seg.synthesize(SynthesisRequest(SECOND, language="ja"))
    assert (second.cache, second.segments_hit, second.segments_rendered) == ("partial", 2, 1)
    assert tone.calls == ["またお越しください。"]
    assert cache.session_counts()["segment_hits"] == 2

    alone = seg.synthesize(SynthesisRequest("お会計は１，２５０円です。", language="ja"))
    assert alone.cache == "hit" and tone.calls == ["またお越しください。"]

    # the stitch is the take a whole render of the paragraph gives (one take per key)
    whole = CachedEngine(ToneEngine(), Cache(tmp_path / "whole")).synthesize(
        SynthesisRequest(SECOND, language="ja"))
    assert second.audio.pcm == whole.audio.pcm


def test_the_language_is_part_of_each_sentence_key(cache: Cache) -> None:
    """The same characters read as Chinese are other sentences (and other audio)."""
    tone = ToneEngine()
    seg = CachedEngine(tone, cache, segments=True)
    seg.synthesize(SynthesisRequest("你好。谢谢。", language="ja"))
    tone.calls.clear()
    result = seg.synthesize(SynthesisRequest("你好。谢谢。", language="zh"))
    assert result.cache == "miss" and tone.calls == ["你好。 谢谢。"]
