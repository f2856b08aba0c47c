"""The storing gate in the library: text rules, distinct callers, quality, one render."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from pathlib import Path

import pytest
from gate_helpers import leaks

from bench.helpers.fixtures import HOT_PHRASES
from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.errors import InvalidParameter
from voxcache.policies.admit import AdmissionSettings, GateSettings, QualitySettings, gate_settings
from voxcache.policies.admit.classes import BUILT_IN, TextRules
from voxcache.testing import forked
from voxcache.testing.faulty import FaultyEngine

HOT = HOT_PHRASES
PRIVATE = {
    "digits": ["Your order 48213 has shipped.", "您的取件码是５８３９２。"],
    "numbers": ["Order number forty-seven, please come to the counter.",
                "请三十七号顾客到柜台取餐。"],
    "email": ["We wrote to li.wei@example.com for you.", "请查收邮件 wang@qq.com 谢谢"],
    "url": ["Track it at https://track.example.com/abc please.", "请访问 www.example.cn 查看"],
    "phone": ["Call me back on +1 415 555 0132 please.", "请拨打 138 0013 8000 联系我们"],
    "money": ["Your balance is $418 today.", "您的余额是三百元。"],
    "date": ["Your visit is on 2026-12-02.", "您的预约在12月2日。"],
    "time": ["Your table is ready at 7:45 pm.", "请在下午三点到达。"],
    "code": ["Your pickup code is Q X 7 B.", "验证码是 AB12CD 请勿告诉他人"],
}


def engine_with(tmp_path: Path, engine=None, **admission) -> CachedEngine:
    gate = GateSettings(admission=AdmissionSettings(**admission))
    return CachedEngine(engine or ToneEngine(), Cache(tmp_path / "cache"), gate=gate)


def _rows(path: Path, sql: str) -> list[tuple]:
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            return db.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []


def digits_of(text: str) -> list[str]:
    return [run for run in re.findall(r"\d+", text) if len(run) >= 3]


@pytest.mark.parametrize("cls,text", [(cls, text) for cls, texts in PRIVATE.items()
                                      for text in texts])
def test_each_class_is_served_and_kept_nowhere(tmp_path: Path, cls: str, text: str) -> None:
    tone = ToneEngine()
    cached = engine_with(tmp_path, tone, never_store=(cls,))
    first = cached.synthesize(SynthesisRequest(text))
    again = cached.synthesize(SynthesisRequest(text))
    assert (first.stored, first.cache, first.reason) == (False, "bypass", f"admission:{cls}")
    assert (again.cache, again.reason) == ("bypass", f"admission:{cls}")  # never a hit
    assert len(tone.calls) == 2 and first.audio.pcm == again.audio.pcm
    cache = cached.cache
    assert cache.in_process.get(first.key) is None and cache.get(first.key) is None
    cached.usage.flush()
    cached.savings.flush()
    cache.folder.flush()
    assert cache.folder.index.query("SELECT key FROM entries") == []
    assert _rows(cache.root / "index.sqlite3", "SELECT text FROM usage") == []
    assert _rows(cache.root / "index.sqlite3", "SELECT key FROM aliases") == []
    assert cache.stats()["counters"][f"refused_admission_{cls}"] == 2
    cache.close()
    # the text, its digits and the key itself are nowhere in the folder
    assert leaks(cache.root, [text, *digits_of(text), first.key]) == []


def test_an_operator_pattern_refuses_by_position_not_by_text(tmp_path: Path) -> None:
    cached = engine_with(tmp_path, never_store=("re:(?i)\\bMr\\.? [A-Z][a-z]+",))
    result = cached.synthesize(SynthesisRequest("Your table is ready, Mr Okafor."))
    assert (result.stored, result.reason) == (False, "admission:pattern")
    plain = cached.synthesize(SynthesisRequest("Your table is ready."))
    assert plain.stored and plain.reason == ""
    cached.cache.close()
    assert leaks(cached.cache.root, ["Okafor"]) == []


def test_plain_phrases_fall_in_no_class() -> None:
    rules = TextRules(list(BUILT_IN))
    phrases = [p["text"] for p in json.loads(HOT.read_text(encoding="utf-8"))["phrases"]]
    spoken_numbers = {"numbers", "time"}  # "forty-two", "fifteen minutes", "at ten"
    for text in phrases:
        found = rules.match(text)
        assert found is None or found in spoken_numbers, (text, found)
    plain = [t for t in phrases if not TextRules(["numbers"]).match(t)]
    assert len(plain) >= 15 and all(rules.match(t) is None for t in plain)


@pytest.mark.parametrize("table,message", [
    ({"admission": {"never_store": ["digitz"]}}, "unknown class 'digitz'"),
    ({"admission": {"never_store": ["re:("]}}, "not a valid regular expression"),
    ({"admission": {"admit_after": 0}}, "admit_after must be 1 or more"),
    ({"admission": {"caller": "cookie"}}, "caller must be"),
    ({"admission": {"colour": "red"}}, "has no setting 'colour'"),
    ({"quality": {"on_fail": "panic"}}, "on_fail must be"),
    ({"quality": {"slowest": 20}}, "slowest below fastest"),
    ({"tenants": {"acme": {"admission": {"never_store": 5}}}}, "list of strings"),
    ({"savings": {"price_per_million_chars": -1}}, "must not be negative"),
])
def test_bad_settings_are_refused_naming_what_to_fix(table: dict, message: str) -> None:
    with pytest.raises(InvalidParameter, match=re.escape(message)):
        gate_settings(table, {})


def test_a_tenant_table_replaces_what_it_names(tmp_path: Path) -> None:
    settings = gate_settings({"admission": {"never_store": ["digits"], "admit_after": 1},
                              "tenants": {"shop": {"admission": {"never_store": []}}}}, {})
    cached = CachedEngine(ToneEngine(), Cache(tmp_path / "c"), gate=settings)
    text = "Platform 9 for the express."
    assert cached.synthesize(SynthesisRequest(text)).reason == "admission:digits"
    shop = cached.synthesize(SynthesisRequest(text, tenant="shop"))
    assert shop.stored and shop.reason == ""
    cached.cache.close()


def test_a_refused_take_is_rendered_once_for_every_caller(tmp_path: Path) -> None:
    tone = ToneEngine()
    cached = engine_with(tmp_path, tone, never_store=("digits",))
    request = SynthesisRequest("Your code is 55012.", params={"delay": 0.5})
    results: list = []
    gate = threading.Barrier(8)

    def ask() -> None:
        gate.wait()
        results.append(cached.synthesize(request))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tone.calls) == 1, tone.calls
    assert {r.audio.pcm for r in results} == {results[0].audio.pcm}
    assert all(not r.stored and r.reason == "admission:digits" for r in results)
    assert sorted(r.cache for r in results) == ["bypass"] * 8
    cached.cache.close()


def test_segments_store_the_plain_sentence_and_not_the_private_one(tmp_path: Path) -> None:
    tone = ToneEngine()
    gate = GateSettings(admission=AdmissionSettings(never_store=("digits",)))
    cached = CachedEngine(tone, Cache(tmp_path / "c"), segments=True, gate=gate)
    text = "Your order has shipped. Order 77310 arrives on Friday."
    first = cached.synthesize(SynthesisRequest(text))
    assert (first.stored, first.reason) == (False, "admission:digits")
    assert first.segments_rendered == 2
    plain = cached.synthesize(SynthesisRequest("Your order has shipped."))
    assert (plain.cache, plain.stored) == ("hit", True)
    again = cached.synthesize(SynthesisRequest(text))
    assert (again.cache, again.segments_hit, again.segments_rendered) == ("bypass", 1, 1)
    assert tone.calls == [text, "Order 77310 arrives on Friday."]
    cached.usage.flush()
    texts = [row[0] for row in _rows(cached.cache.root / "index.sqlite3",
                                     "SELECT text FROM usage")]
    assert texts == ["Your order has shipped."]
    cached.cache.close()
    assert leaks(cached.cache.root, ["77310", "arrives on Friday", first.key]) == []


@pytest.mark.parametrize("fault,reason", [
    ("runaway", "runaway"), ("truncated", "truncated"), ("silent", "silence"),
    ("clipped", "clipping"), ("nonfinite", "nonfinite"), ("dc", "dc"),
    ("gap", "inner_silence")])
def test_a_faulty_take_is_served_not_stored_and_counted(tmp_path: Path, fault: str,
                                                        reason: str) -> None:
    engine = FaultyEngine()
    cached = CachedEngine(engine, Cache(tmp_path / "c"))
    text = "Please keep your belongings with you at all times."
    result = cached.synthesize(SynthesisRequest(text, params={"fault": fault}))
    assert (result.stored, result.cache, result.reason) == (False, "bypass", f"quality:{reason}")
    assert result.audio.frames > 0
    assert cached.cache.get(result.key) is None
    good = cached.synthesize(SynthesisRequest(text))
    assert good.stored and good.reason == ""
    counters = cached.cache.stats()["counters"]
    assert counters[f"refused_quality_{reason}"] == 1
    from voxcache.policies.admit import recent_refusals

    assert [(r["key"], r["reason"]) for r in recent_refusals(cached.cache)] == [
        (result.key, f"quality:{reason}")]
    cached.cache.close()


def test_retry_renders_once_more_and_stores_the_good_take(tmp_path: Path) -> None:
    engine = FaultyEngine()
    gate = GateSettings(quality=QualitySettings(on_fail="retry"))
    cached = CachedEngine(engine, Cache(tmp_path / "c"), gate=gate)
    request = SynthesisRequest("The next train arrives shortly.", params={"fault": "flaky"})
    result = cached.synthesize(request)
    assert result.stored and result.reason == "" and len(engine.calls) == 2
    assert cached.synthesize(request).cache == "hit"
    assert cached.cache.stats()["counters"]["refused_quality_runaway"] == 1
    cached.cache.close()


def test_the_gate_can_be_switched_off(tmp_path: Path) -> None:
    gate = GateSettings(quality=QualitySettings(enabled=False))
    cached = CachedEngine(FaultyEngine(), Cache(tmp_path / "c"), gate=gate)
    result = cached.synthesize(SynthesisRequest("Doors closing.", params={"fault": "silent"}))
    assert result.stored
    cached.cache.close()


def test_admit_after_counts_distinct_callers_of_every_process(tmp_path: Path) -> None:
    """Two CachedEngines on one folder stand for two workers: the count is the folder's."""
    tone_a, tone_b = ToneEngine(), ToneEngine()
    gate = GateSettings(admission=AdmissionSettings(admit_after=2))
    worker_a = CachedEngine(tone_a, Cache(tmp_path / "c"), gate=gate)
    worker_b = CachedEngine(tone_b, Cache(tmp_path / "c"), gate=gate)
    text = "Your table is ready."
    first = worker_a.synthesize(SynthesisRequest(text, caller="sk-alice-0001"))
    assert (first.stored, first.reason) == (False, "admission:admit_after")
    same = worker_b.synthesize(SynthesisRequest(text, caller="sk-alice-0001"))
    assert (same.stored, same.reason) == (False, "admission:admit_after")
    nobody = worker_b.synthesize(SynthesisRequest(text))  # no caller: counts as none
    assert not nobody.stored
    second = worker_b.synthesize(SynthesisRequest(text, caller="sk-bob-0002"))
    assert second.stored and second.reason == ""
    assert worker_a.synthesize(SynthesisRequest(text, caller="sk-carol")).cache == "hit"
    assert len(tone_a.calls) + len(tone_b.calls) == 4
    assert worker_a.cache.folder.index.query("SELECT * FROM callers") == []  # forgotten
    for worker in (worker_a, worker_b):
        worker.cache.close()
    assert leaks(tmp_path / "c", ["sk-alice-0001", "sk-bob-0002"]) == []


@pytest.mark.parametrize("cls", [c for c in BUILT_IN if c != "numbers"])
def test_each_class_alone_leaves_words_alone(cls: str) -> None:
    """Checked class by class (in a list, an earlier class would hide a later one's false
    match): hyphenated words, single letters and spoken numbers are not codes, dates…"""
    rules = TextRules([cls])
    for text in ["A well-known, state-of-the-art place.", "I am a cat, O my friend.",
                 "Order number forty-seven, please come to the counter.",
                 "Welcome! Please scan the code on your table to order.",
                 "列车即将进站，请站在黄线以内候车。", "我们一起去吧，等一下。"]:
        assert rules.match(text) is None, (cls, text)


def test_synth_says_why_a_take_was_not_stored(tmp_path: Path) -> None:
    import sys

    config = tmp_path / "voxcache.toml"
    config.write_text('[admission]\nnever_store = ["digits"]\n')
    run = forked.run([sys.executable, "-m", "voxcache", "--cache-dir", str(tmp_path / "c"),
                      "--config", str(config), "--engine", "tone", "synth",
                      "Gate 42 is open.", "--json"], capture_output=True, text=True,
                     timeout=120)
    summary = json.loads(run.stdout)
    assert (summary["cache"], summary["stored"], summary["reason"]) == (
        "bypass", False, "admission:digits")
    bad = tmp_path / "bad.toml"
    bad.write_text('[admission]\nnever_store = ["digitz"]\n')
    refused = forked.run([sys.executable, "-m", "voxcache", "--cache-dir",
                          str(tmp_path / "c"), "--config", str(bad), "--engine", "tone",
                          "synth", "Hello."], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "unknown class 'digitz'" in refused.stderr
