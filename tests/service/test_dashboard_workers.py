"""``voxcache serve --workers 2``: the dashboard and ``/metrics`` count what both served.

Each worker is its own process with its own counters, and a poll or a scrape
reaches one of them at random. The requests go out on fresh connections from
several threads, so both workers serve some (the test checks that they did);
the client counts every answer's X-Cache, and whichever worker answers, the
totals it shows are the sum.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import httpx
import pytest

from voxcache.testing import waiting

pytestmark = pytest.mark.slow

PHRASES = [f"Announcement number {n}." for n in range(8)]


def _ask(url: str, text: str) -> str:
    answer = httpx.post(f"{url}/v1/audio/speech", json={"input": text, "response_format": "wav"},
                        timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.headers["x-cache"]


def _serve_mix(url: str) -> Counter[str]:
    """Every phrase four times, from eight threads, each request on its own connection."""
    asks = [text for text in PHRASES for _ in range(4)]
    with ThreadPoolExecutor(8) as pool:
        return Counter(pool.map(lambda text: _ask(url, text), asks))


def _requests_total(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("voxcache_requests_total{"))


_until = partial(waiting.until, bound=20.0, what="the dashboard's figures")


def test_every_scrape_of_two_workers_shows_what_both_served(serve_proc, tmp_path) -> None:
    env = {"VOXCACHE_DASHBOARD_INTERVAL": "1"}
    with serve_proc(tmp_path / "cache", "--workers", "2", env=env) as (url, _proc):
        served = _serve_mix(url)
        time.sleep(2.5)  # both workers have published at least once since
        totals = [_requests_total(httpx.get(f"{url}/metrics").text) for _ in range(12)]
    assert totals == [float(served.total())] * 12, (totals, served)


def test_the_dashboards_totals_are_the_sum_of_both_workers(serve_proc, tmp_path) -> None:
    env = {"VOXCACHE_DASHBOARD_INTERVAL": "1"}
    with serve_proc(tmp_path / "cache", "--workers", "2", env=env) as (url, _proc):
        def two_workers() -> bool:
            return len(httpx.get(f"{url}/v1/dashboard").json()["service"]["workers"]) == 2

        assert _until(two_workers), "the second worker never reported"
        served: Counter[str] = Counter()
        for _ in range(5):  # until the kernel has handed both workers some connections
            served += _serve_mix(url)
            time.sleep(1.5)
            workers = httpx.get(f"{url}/v1/dashboard").json()["service"]["workers"]
            if all(w["requests"] > 0 for w in workers):
                break
        time.sleep(2.5)  # every worker's counters in the index and the history

        def settled() -> dict | None:  # type: ignore[type-arg]
            doc = httpx.get(f"{url}/v1/dashboard").json()
            return doc if doc["requests"]["total"] == served.total() else None

        doc = _until(settled)
        assert doc, f"the dashboard never showed {served.total()} requests"
        assert doc["requests"]["by_cache"] == dict(served)
        workers = doc["service"]["workers"]
        assert len(workers) == 2 and all(w["requests"] > 0 for w in workers), workers
        assert sum(w["requests"] for w in workers) == served.total()
        assert len({w["pid"] for w in workers}) == 2
        counters = httpx.get(f"{url}/v1/stats").json()["counters"]
        hits = sum(v for k, v in counters.items() if k.startswith("hits_"))
        for _ in range(6):  # any worker may answer: each shows the same
            doc = httpx.get(f"{url}/v1/dashboard").json()
            assert doc["requests"]["total"] == served.total()
            assert (doc["hit_rate"]["hits"], doc["hit_rate"]["misses"]) == (
                hits, counters["misses"])
            assert doc["hit_rate"]["value"] == hits / (hits + counters["misses"])
