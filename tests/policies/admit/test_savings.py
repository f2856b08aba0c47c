"""The savings ledger against hand-computed totals: hits, characters, engine seconds, money."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.policies import savings
from voxcache.policies.admit import GateSettings, SavingsSettings
from voxcache.testing.cli import run_cli

PRICES = SavingsSettings(price_per_million_chars=15.0, price_per_engine_second=0.5,
                         currency="EUR")


def cli(folder: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--cache-dir", str(folder), "--config", str(config), "--engine", "tone",
                    "stats", "--savings", *args])


def test_the_ledger_adds_up_across_restarts_and_exports(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    config = tmp_path / "voxcache.toml"
    config.write_text("[savings]\nprice_per_million_chars = 15.0\n"
                      "price_per_engine_second = 0.5\ncurrency = \"EUR\"\n")
    gate = GateSettings(savings=PRICES)
    cached = CachedEngine(ToneEngine(), Cache(folder), gate=gate)
    hello = SynthesisRequest("Hello there.", params={"delay": 0.05})
    night = SynthesisRequest("Good night.", voice="bass", tenant="acme",
                             params={"delay": 0.05})
    first = cached.synthesize(hello)
    second = cached.synthesize(night)
    seconds = {"hello": first.entry.header.meta["render_seconds"],
               "night": second.entry.header.meta["render_seconds"]}
    assert seconds["hello"] >= 0.05 and seconds["night"] >= 0.05
    for _ in range(3):
        assert cached.synthesize(hello).cache == "hit"
    for _ in range(2):
        assert cached.synthesize(night).cache == "hit"
    cached.savings.close()
    cached.cache.close()
    again = CachedEngine(ToneEngine(), Cache(folder), gate=gate)  # a restart
    assert again.synthesize(hello).cache == "hit"
    again.savings.close()
    found = {(r["tenant"], r["voice"]): r for r in
             savings.totals(savings.rows(again.cache), PRICES)}
    again.cache.close()
    expected = {("default", "alto"): (4, 4 * len("Hello there."), 4 * seconds["hello"]),
                ("acme", "bass"): (2, 2 * len("Good night."), 2 * seconds["night"])}
    assert set(found) == set(expected)
    for where, (hits, chars, spent) in expected.items():
        row = found[where]
        assert (row["hits"], row["chars"]) == (hits, chars)
        assert row["seconds"] == pytest.approx(spent, abs=1e-5)
        assert row["money"] == pytest.approx(chars / 1e6 * 15.0 + spent * 0.5, abs=1e-5)
        assert row["currency"] == "EUR"

    as_json = json.loads(cli(folder, config, "--json").stdout)
    assert as_json["total"]["hits"] == 6 and as_json["currency"] == "EUR"
    assert as_json["total"]["money"] == pytest.approx(
        sum(r["money"] for r in found.values()), abs=1e-5)
    rows = list(csv.DictReader(io.StringIO(cli(folder, config, "--csv").stdout)))
    assert {(r["tenant"], r["voice"], int(r["hits"])) for r in rows} == {
        ("default", "alto", 4), ("acme", "bass", 2)}
    assert json.loads(cli(folder, config, "--json", "--since", "1h").stdout)["total"][
        "hits"] == 6
    assert json.loads(cli(folder, config, "--json", "--since", "2099-01-01").stdout)[
        "rows"] == []
    table = cli(folder, config)
    assert table.returncode == 0 and "acme" in table.stdout and "EUR" in table.stdout
    bad = cli(folder, config, "--since", "last tuesday")
    assert bad.returncode == 2 and "neither a duration" in bad.stderr


def test_stored_sentences_of_a_stitched_take_are_savings_too(tmp_path: Path) -> None:
    cached = CachedEngine(ToneEngine(), Cache(tmp_path / "c"), segments=True,
                          gate=GateSettings(savings=PRICES))
    cached.synthesize(SynthesisRequest("Doors closing."))
    stitched = cached.synthesize(SynthesisRequest("Doors closing. Stand clear."))
    assert (stitched.segments_hit, stitched.segments_rendered) == (1, 1)
    cached.savings.flush()
    (row,) = savings.totals(savings.rows(cached.cache), PRICES)
    assert (row["hits"], row["chars"]) == (1, len("Doors closing."))
    cached.cache.close()


def test_a_ledger_that_cannot_be_written_keeps_its_figures(tmp_path: Path) -> None:
    cached = CachedEngine(ToneEngine(), Cache(tmp_path / "c"), gate=GateSettings(savings=PRICES))
    cached.synthesize(SynthesisRequest("Mind the gap."))
    cached.synthesize(SynthesisRequest("Mind the gap."))
    with cached.cache.folder.index.transaction() as db:  # this thread's connection is busy:
        cached.savings.flush()  # the ledger's write fails, its figures stay pending
        assert db.execute("SELECT COUNT(*) FROM savings").fetchone() == (0,)
    cached.savings.flush()
    (row,) = savings.totals(savings.rows(cached.cache), PRICES)
    assert row["hits"] == 1
    cached.cache.close()
