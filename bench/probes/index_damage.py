"""``python -m bench.probes.index_damage [--entries N]``: what a damaged index costs a start.

Fills a folder with N small takes, replaces its index with garbage, then opens it and
measures how long the open took, how long until ``stats`` counts every take (the rebuild),
how long SQLite's ``quick_check`` of the rebuilt index takes (run at every start, in the
background), and what the per-statement check that the index file is still in place costs
(one ``lstat``). Run it against another commit with ``PYTHONPATH`` to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.entry import audio_entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.index_damage",
                                     description=__doc__)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--dir", help="work folder (default: a temp folder, removed after)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        root = Path(args.dir or temp) / "cache"
        figures = measure(root, args.entries)
    print(json.dumps(figures, indent=2))
    return 0


def measure(root: Path, entries: int) -> dict[str, float]:
    cache = Cache(root)
    started = time.perf_counter()
    for i in range(entries):
        cache.put(audio_entry(f"{i:064x}", Audio(i.to_bytes(4, "big") * 75, 16000)))
    filled = time.perf_counter() - started
    cache.close()
    index = root / "index.sqlite3"
    index.write_bytes(os.urandom(1 << 16))

    started = time.perf_counter()
    cache = Cache(root)
    opened = time.perf_counter() - started
    while (cache.stats()["tiers"]["disk"]["entries"] or 0) < entries:
        time.sleep(0.1)  # a poll, not a load on the rebuild it waits for
    counted = time.perf_counter() - started
    cache.close()

    with sqlite3.connect(index) as db:
        started = time.perf_counter()
        assert db.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok"
        checked = time.perf_counter() - started

    rounds = 200_000
    started = time.perf_counter()
    for _ in range(rounds):
        os.lstat(index)
    lstat_us = (time.perf_counter() - started) / rounds * 1e6
    return {"entries": entries, "fill_seconds": round(filled, 2),
            "open_seconds": round(opened, 4), "until_stats_counts_all_seconds": round(counted, 2),
            "quick_check_seconds": round(checked, 3),
            "index_megabytes": round(index.stat().st_size / 1e6, 1),
            "lstat_microseconds": round(lstat_us, 2)}


if __name__ == "__main__":
    raise SystemExit(main())
