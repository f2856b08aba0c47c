"""``segments = "auto"`` probes an engine's split in the engine's own default language."""

from __future__ import annotations

import logging

import pytest

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.policies.segments import enabled
from voxcache.request import SynthesisRequest


def _han(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


class ChineseOnly(ToneEngine):
    """A Chinese engine whose front end reads Han text only: it cannot split Latin text
    (a Chinese g2p that has nothing to say about "One. Two.")."""

    id = "zh-only"
    languages = ("zh",)
    default_language = "zh"

    def split_sentences(self, text: str) -> list[str] | None:
        return super().split_sentences(text) if _han(text) else None


class RefusesLatin(ChineseOnly):
    """The same, with a front end that raises on what it cannot read."""

    def split_sentences(self, text: str) -> list[str] | None:
        if not _han(text):
            raise ValueError(f"no pinyin for {text!r}")
        return super().split_sentences(text)


@pytest.mark.parametrize("engine_class", [ChineseOnly, RefusesLatin])
def test_a_chinese_only_engine_gets_segment_mode(engine_class: type[ToneEngine], cache: Cache,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    engine = engine_class()
    with caplog.at_level(logging.INFO, logger="voxcache.segments"):
        on = enabled("auto", engine)
    assert on
    assert "is on for engine 'zh-only'" in caplog.text
    assert "its default language is 'zh', probed with '你好。谢谢。' (zh)" in caplog.text

    seg = CachedEngine(engine, cache, segments=on)
    seg.synthesize(SynthesisRequest("欢迎光临。今天的特价是红烧肉！"))
    engine.calls.clear()
    result = seg.synthesize(SynthesisRequest("欢迎光临。请扫码点餐。"))
    assert (result.cache, result.segments_hit, engine.calls) == ("partial", 1, ["请扫码点餐。"])


def test_a_japanese_default_is_probed_in_japanese(caplog: pytest.LogCaptureFixture) -> None:
    class JapaneseTone(ToneEngine):
        default_language = "ja"

    with caplog.at_level(logging.INFO, logger="voxcache.segments"):
        assert enabled("auto", JapaneseTone())
    assert "probed with 'こんにちは。ありがとう。' (ja)" in caplog.text


def test_a_splitter_that_fails_on_its_own_language_turns_auto_off_and_says_why(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(ChineseOnly):
        def split_sentences(self, text: str) -> list[str] | None:
            raise RuntimeError("dictionary missing")

    with caplog.at_level(logging.INFO, logger="voxcache.segments"):
        assert enabled("auto", Broken()) is False
    assert "is off" in caplog.text and "dictionary missing" in caplog.text
    assert enabled("on", Broken()) is True  # "on" is the operator's word: no probe


def test_auto_stays_off_where_it_is_unsafe_and_on_where_it_was() -> None:
    """Unchanged by the probe's language (regression guards)."""

    class Splitless(ToneEngine):
        def split_sentences(self, text: str) -> list[str] | None:
            return None

    class Neighbours(ToneEngine):
        segments_context_free = False

    assert enabled("auto", ToneEngine()) is True
    assert enabled("auto", Splitless()) is False
    assert enabled("auto", Neighbours()) is False


@pytest.mark.parametrize(("language", "sample"), [
    ("en-us", "en"), ("zh", "zh"), ("all_zh", "zh"), ("ja-JP", "ja"), ("cmn", "zh"),
    ("yue", "zh"), ("ko", "ko"), ("tlh", "en"), ("", "en")])
def test_the_sample_follows_the_primary_language(language: str, sample: str) -> None:
    from voxcache.policies.segment_probe import sample_for

    assert sample_for(language)[0] == sample
