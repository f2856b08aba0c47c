"""The command line over segments, usage analytics and re-rendering after an upgrade."""

from __future__ import annotations

import json

import pytest

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.cli import main
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest


def cli(capsys: pytest.CaptureFixture[str], cache_dir, *args: str) -> object:
    assert main(["--cache-dir", str(cache_dir), "--engine", "tone", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_synth_json_says_partial_with_counts(capsys, cache_dir) -> None:
    cli(capsys, cache_dir, "synth", "Good morning. The shop opens at nine.", "--json")
    info = cli(capsys, cache_dir, "synth", "Good morning. Coffee is free today.", "--json")
    assert info["cache"] == "partial"
    assert info["segments"] == {"hit": 1, "rendered": 1}


def test_top_misses_and_hits(capsys, cache_dir) -> None:
    for text in ["Hello there. Nice day.", "Hello there. Nice day.", "Hello there. Rain."]:
        cli(capsys, cache_dir, "synth", text, "--json")
    misses = cli(capsys, cache_dir, "stats", "--top-misses", "10", "--json")
    by_text = {(r["kind"], r["text"]): r for r in misses}
    assert by_text[("segment", "Hello there.")]["asked"] == 2  # the repeat was a whole hit
    assert by_text[("request", "Hello there. Nice day.")]["missed"] == 1
    hits = cli(capsys, cache_dir, "stats", "--top-hits", "1", "--kind", "request", "--json")
    assert [(r["text"], r["hits"]) for r in hits] == [("Hello there. Nice day.", 1)]


def test_usage_table_is_bounded(tmp_path) -> None:
    cache = Cache(tmp_path / "c")
    cached = CachedEngine(ToneEngine(), cache)
    cached.usage.max_rows = 20
    for i in range(50):
        cached.synthesize(SynthesisRequest(f"Phrase number {i}."))
        if i % 10 == 9:
            cached.usage.flush()
    assert len(cached.usage.top("asked", 1000)) <= 20
    cache.close()


def test_rerender_from_an_old_revision(capsys, cache_dir) -> None:
    cache = Cache(cache_dir)
    old = CachedEngine(ToneEngine(model_revision="tone-0"), cache)
    for text in ["Gate one is open.", "Gate one is open.", "Gate two is closed."]:
        old.synthesize(SynthesisRequest(text))
    old.usage.flush()
    cache.close()
    summary = cli(capsys, cache_dir, "rerender", "--from-revision", "tone-0", "--top", "1",
                  "--json")
    assert (summary["rendered"], summary["to_revision"]) == (1, "tone-1")
    info = cli(capsys, cache_dir, "synth", "Gate one is open.", "--json")
    assert info["cache"] == "hit"  # warmed for the new model ahead of traffic
    info = cli(capsys, cache_dir, "synth", "Gate two is closed.", "--json")
    assert info["cache"] == "miss"  # not in the top 1


def test_warm_from_top_misses(capsys, cache_dir) -> None:
    cli(capsys, cache_dir, "synth", "Aisle five. Aisle six.", "--json")
    assert main(["--cache-dir", str(cache_dir), "purge", "--all"]) == 0
    capsys.readouterr()
    summary = cli(capsys, cache_dir, "warm", "--from-top-misses", "5", "--json")
    assert summary["rendered"] >= 1 and not summary["failed"]
    info = cli(capsys, cache_dir, "synth", "Aisle five. Aisle six.", "--json")
    assert info["cache"] == "hit"
