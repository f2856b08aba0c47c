"""A Japanese paragraph through a real ``voxcache serve`` (tone engine, segments = "auto")."""

from __future__ import annotations

import re

import httpx

FIRST = "いらっしゃいませ。本日のおすすめは豚の角煮です！お会計は１，２５０円です。"
SECOND = "いらっしゃいませ。お会計は１，２５０円です。またお越しください。"


def _speech(url: str, text: str) -> httpx.Response:
    response = httpx.post(f"{url}/v1/audio/speech", timeout=30, json={
        "model": "tts-1", "input": text, "language": "ja", "response_format": "wav"})
    assert response.status_code == 200, response.text
    return response


def _counter(metrics: str, event: str) -> float:
    found = re.search(rf'^voxcache_cache_events_total{{event="{event}"}} (\S+)$', metrics,
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_japanese_paragraph_reuses_the_sentences_of_an_earlier_one(tmp_path,
                                                                    serve_proc) -> None:
    with serve_proc(tmp_path / "cache") as (url, proc):
        first = _speech(url, FIRST)
        second = _speech(url, SECOND)
        again = _speech(url, SECOND)
        alone = _speech(url, "またお越しください。")
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
    log = proc.stdout.read()
    assert (first.headers["x-cache"], first.headers["x-cache-segments-rendered"]) == (
        "MISS", "3")
    assert second.headers["x-cache"] == "PARTIAL"
    assert (second.headers["x-cache-segments-hit"],
            second.headers["x-cache-segments-rendered"]) == ("2", "1")
    assert again.headers["x-cache"] == "HIT" and again.content == second.content
    assert alone.headers["x-cache"] == "HIT"  # the sentence rendered inside the paragraph
    assert (_counter(metrics, "segment_hits"), _counter(metrics, "segment_renders")) == (2, 4)
    assert "segment mode (auto) is on for engine 'tone'" in log  # and why: the probe
