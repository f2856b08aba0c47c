"""Clause segments: the split, the capability, reuse, learned pauses and streaming."""

from __future__ import annotations

import re

import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.errors import InvalidParameter, UnsupportedFeature
from voxcache.policies.clauses import split_clauses
from voxcache.policies.joins import interior_pauses, pause_profile
from voxcache.policies.segments import enabled
from voxcache.request import SynthesisRequest

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}

SPLITS = [
    ("Thanks for waiting, your order has shipped, and it should arrive soon.",
     ["Thanks for waiting,", "your order has shipped,", "and it should arrive soon."]),
    ("It costs 1,000 dollars, or 2,500.50 with tax.",
     ["It costs 1,000 dollars,", "or 2,500.50 with tax."]),
    ("Press 1, 2 or 3.", ["Press 1, 2 or 3."]),
    ("We open at 9:30, not before.", ["We open at 9:30,", "not before."]),
    ("Bring tools, e.g., hammers, to work.", ["Bring tools,", "e.g., hammers,", "to work."]),
    ("Mr. Smith, your call is next.", ["Mr. Smith,", "your call is next."]),
    ('He said "yes, no, maybe" and left, slowly.',
     ['He said "yes, no, maybe" and left,', "slowly."]),
    ("She wrote (in short, no) and stopped.", ["She wrote (in short, no) and stopped."]),
    ("He said “wait, please” twice.", ["He said “wait, please” twice."]),
    ("Well... okay, fine.", ["Well... okay,", "fine."]),
    ("Wait..., what?", ["Wait..., what?"]),
    ("Visit http://example.com,then call.", ["Visit http://example.com,then call."]),
    ("Note: the office — as you know — is closed.",
     ["Note:", "the office —", "as you know —", "is closed."]),
    ("Yes, —", ["Yes, —"]),
    ('An open "quote, never closed, here.', ['An open "quote, never closed, here.']),
    ("我们已经收到您的订单，预计明天送达；请保持电话畅通。",
     ["我们已经收到您的订单，", "预计明天送达；", "请保持电话畅通。"]),
    ("苹果、香蕉、橘子都有。", ["苹果、", "香蕉、", "橘子都有。"]),
    ("总价是１，０００元，谢谢。", ["总价是１，０００元，", "谢谢。"]),
    ("他说：“你好，再见。”然后走了。", ["他说：", "“你好，再见。”然后走了。"]),
    ("「はい、そうです」と言った。", ["「はい、そうです」と言った。"]),
]


@pytest.mark.parametrize(("text", "clauses"), SPLITS)
def test_split_edge_cases(text: str, clauses: list[str]) -> None:
    assert split_clauses(text) == clauses
    for clause in clauses:  # a clause splits into itself
        assert split_clauses(clause) == [clause]
    assert "".join("".join(c.split()) for c in clauses) == "".join(text.split())


class NoClauses(ToneEngine):
    """A tone engine that does not declare clause safety."""

    clause_safe = False


class PausingTone(ToneEngine):
    """Tones that pause ``pause`` seconds at each clause mark inside a sentence, as a
    speech engine does at a comma; its model revision carries the pause."""

    clause_safe = True

    def __init__(self, pause: float) -> None:
        super().__init__(model_revision=f"pausing-{pause}")
        self.pause = pause

    def _tone(self, sentence: str, request) -> Audio:  # type: ignore[no-untyped-def]
        parts = [p for p in re.split(r"(?<=[,;:—])\s*", sentence) if p]
        gap = Audio(b"\0\0" * int(self.pause * self.sample_rate), self.sample_rate)
        out: list[Audio] = []
        for i, part in enumerate(parts):
            out += ([gap] if i else []) + [super()._tone(part, request)]
        return Audio.join(out)


def test_an_engine_without_the_capability_is_never_split_below_the_sentence(
        cache: Cache) -> None:
    engine = NoClauses()
    assert enabled("clauses", engine) == "clauses" and enabled("sentences", engine) is True
    with pytest.raises(UnsupportedFeature, match="clause_safe"):
        CachedEngine(engine, cache, segments="clauses")
    with pytest.raises(InvalidParameter, match="clauses"):
        enabled("phrases", engine)
    cached = CachedEngine(engine, cache, segments=True)
    cached.synthesize(SynthesisRequest("Thanks for waiting, your order has shipped."))
    cached.synthesize(SynthesisRequest("Thanks for waiting, your refund is issued. Bye, now."))
    assert engine.calls == ["Thanks for waiting, your order has shipped.",
                            "Thanks for waiting, your refund is issued. Bye, now."]


def test_the_longest_stored_run_of_clauses_wins(cache: Cache) -> None:
    engine = ToneEngine()
    whole = CachedEngine(engine, cache)  # the engine's own render of one sentence, stored
    whole.synthesize(SynthesisRequest("Thanks for waiting, your refund was issued."))
    cached = CachedEngine(engine, cache, segments="clauses")
    cached.synthesize(SynthesisRequest("Your refund was issued, have a nice day."))
    text = "Thanks for waiting, your refund was issued, have a nice day."
    plan = cached.explain(SynthesisRequest(text))["segments"]
    # the stored sentence ends in a stop, this run in a comma: not the same text, not reused
    assert [s["text"] for s in plan] == ["Thanks for waiting,", "your refund was issued,",
                                         "have a nice day."]
    text = "Thanks for waiting, your refund was issued. Sorry, have a nice day."
    plan = cached.explain(SynthesisRequest(text))["segments"]
    assert [s["text"] for s in plan] == ["Thanks for waiting, your refund was issued.",
                                         "Sorry,", "have a nice day."]
    calls = len(engine.calls)
    result = cached.synthesize(SynthesisRequest(text))
    assert engine.calls[calls:] == ["Sorry,"]  # the stored sentence and clause: none again
    assert (result.segments_hit, result.segments_rendered) == (2, 1)


def test_the_learned_pause_changes_with_the_model_revision(cache: Cache) -> None:
    heard = {}
    for pause in (0.2, 0.35):
        engine = PausingTone(pause)
        cached = CachedEngine(engine, cache, segments="clauses")
        cached.synthesize(SynthesisRequest("Thanks for waiting, your order has shipped."))
        cached.synthesize(SynthesisRequest("Sorry about that, your refund was issued."))
        calls = len(engine.calls)
        result = cached.synthesize(SynthesisRequest("Thanks for waiting, your refund was issued."))
        assert engine.calls[calls:] == [] and result.cache == "hit"
        learned = pause_profile(cached, cached.resolve(SynthesisRequest("x")))
        assert learned[","] == pytest.approx(pause, abs=0.011)
        heard[pause] = interior_pauses(result.audio)
        # learned once per revision: a new process on the same cache renders no probe
        again = PausingTone(pause)
        assert pause_profile(CachedEngine(again, cache, segments="clauses"),
                             cached.resolve(SynthesisRequest("x"))) == learned
        assert again.calls == []
    assert heard[0.2] == [pytest.approx(0.2, abs=0.011)]
    assert heard[0.35] == [pytest.approx(0.35, abs=0.011)]


def test_stream_hands_out_a_cached_first_clause_before_the_render_ends(
        cache: Cache, gated_tone) -> None:
    engine = gated_tone
    engine.clause_safe = True
    cached = CachedEngine(engine, cache, segments="clauses", lock_wait=10)
    cached.synthesize(SynthesisRequest("Thanks for waiting, your order has shipped."))
    engine.gate.clear()  # the engine cannot finish until the first clause is out
    text = "Thanks for waiting, a new clause comes here; and one more."
    chunks = cached.stream(SynthesisRequest(text))
    first = next(chunks)  # would block (then fail) if it waited for the render
    engine.gate.set()
    rest = list(chunks)
    assert engine.calls[-2:] == ["a new clause comes here;", "and one more."]
    again = cached.synthesize(SynthesisRequest(text))
    assert (again.cache, again.segments_hit) == ("hit", 3)
    assert len(rest) == 2
    assert again.audio.pcm == first.pcm + b"".join(c.pcm for c in rest)
    stored = cached.synthesize(SynthesisRequest("Thanks for waiting,")).audio
    assert 0 < len(first.pcm) <= len(stored.pcm)  # the stored clause, its tail trimmed


@pytest.mark.piper
def test_piper_sentence_of_two_stored_clauses_renders_nothing(piper, cache: Cache) -> None:
    cached = CachedEngine(piper, cache, segments="clauses")

    def ask(text: str):  # type: ignore[no-untyped-def]
        return cached.synthesize(SynthesisRequest(text, params=DETERMINISTIC))

    ask("Thanks for waiting, your order has shipped.")
    ask("Sorry about the delay, your refund was issued.")
    renders = cached.cache.stats()["counters"]["syntheses"]
    result = ask("Thanks for waiting, your refund was issued.")
    assert cached.cache.stats()["counters"]["syntheses"] == renders, "the engine rendered"
    assert (result.cache, result.tier, result.segments_hit) == ("hit", "segments", 2)
    learned = pause_profile(cached, cached.resolve(SynthesisRequest("x", params=DETERMINISTIC)))
    pauses = interior_pauses(result.audio)
    assert max(pauses) == pytest.approx(learned[","], abs=0.011)
    whole = b"".join(c.audio_int16_bytes for c in piper.voice.synthesize(
        "Thanks for waiting, your refund was issued."))
    assert result.audio.pcm != whole  # a stitch, never stored as the engine's own take
    assert not result.stored
