"""The Grafana board's rows for the shared tiers, leases and the bus, the stage caches and the
edge, each expression run on a real Prometheus scraping nodes that did what the panel shows.

Two ``voxcache serve`` nodes share a redis-server and a moto S3 bucket; a take rendered on
one is read by the other from Redis (and, its Redis copy damaged, from S3), one key is
asked on both at once (one render, a lease wake-up), a purge on one reaches the other; the
stage cache is used on one node's folder; an edge in front of a third node asks its
center for misses, then answers from its fallback engine once the center is stopped.
Every expression of those rows must then return series (an expression naming a series
that does not exist returns nothing: Prometheus accepts it all the same).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from voxcache.cache import Cache
from voxcache.stages import Clip, StageCache, stage_cached
from voxcache.testing.servers import MotoS3Server, PrometheusServer, RedisServer

from .conftest import new_bucket, new_prefix, nodes, raw_redis, until

GRAFANA = Path(__file__).resolve().parents[3] / "docs" / "operating" / "grafana-dashboard.json"
ROWS = ("Shared tiers", "Render leases", "Stage caches", "Edge")


def row_expressions() -> dict[str, list[str]]:
    """Each panel's expressions under the rows above (the board's own order)."""
    found: dict[str, list[str]] = {}
    row = None
    for panel in json.loads(GRAFANA.read_text())["panels"]:
        if panel["type"] == "row":
            row = panel["title"] if panel["title"].startswith(ROWS) else None
        elif row is not None:
            found[panel["title"]] = [t["expr"] for t in panel["targets"]]
    return found


def test_the_board_has_the_rows() -> None:
    rows = [p["title"] for p in json.loads(GRAFANA.read_text())["panels"] if p["type"] == "row"]
    assert [next(r for r in rows if r.startswith(name)) for name in ROWS]
    assert len(row_expressions()) >= 12


def exercise_stage_cache(folder: Path) -> None:
    """A stage extraction on a node's folder: a miss, then a hit (folder counters)."""
    cache = Cache(folder)
    try:
        stages = StageCache(cache)

        @stage_cached(stages, kind="embedding", extractor="grafana-test", revision="1")
        def embed(clip: Clip) -> np.ndarray:
            return clip.mono()[:32]

        rate = 16000
        tone = (0.3 * np.sin(np.arange(rate) * 2 * np.pi * 220 / rate) * 32767).astype("<i2")
        import io

        import soundfile

        wav = io.BytesIO()
        soundfile.write(wav, tone, rate, format="WAV")
        assert embed(wav.getvalue()).cache == "miss"
        assert embed(wav.getvalue()).cache == "hit"
        cache.folder.flush()
    finally:
        cache.close()


@pytest.mark.slow
def test_every_expression_of_the_new_rows_has_data(tmp_path: Path, redis_server: RedisServer,
                                                   s3_server: MotoS3Server) -> None:
    expressions = row_expressions()
    assert len(expressions) >= 12, expressions
    for name in ("shared", "center", "edge"):
        (tmp_path / name).mkdir()
    prefix = new_prefix()
    redis_url = f"{redis_server.url}?prefix={prefix}"
    tiers = ["memory", "disk", redis_url, f"s3://{new_bucket(s3_server)}/grafana"]
    with nodes(tmp_path / "shared", tiers, count=2, env=s3_server.env) as (a, b), \
            nodes(tmp_path / "center", ["memory", "disk"], count=1) as (center,), \
            nodes(tmp_path / "edge", ["memory", "disk"], count=1,
                  args=("--upstream", f"voxcache={center.url}"),
                  extra_config='upstream_options = {fallback = "tone"}\n') as (edge,):
        targets = [n.url.removeprefix("http://") for n in (a, b, edge)]
        with PrometheusServer(tmp_path / "prometheus", [
                {"job_name": "voxcache", "static_configs": [{"targets": targets}]}]) as prom:
            # shared tiers: rendered on A, a hit from Redis on B
            first = a.speak("Platform one.")
            assert first.headers["x-cache"] == "MISS"
            assert b.speak("Platform one.").headers["x-cache-tier"] == "redis"
            # a lease: one key asked on both nodes at once, rendered once
            both = [threading.Thread(target=n.speak, args=("Platform two.",),
                                     kwargs={"params": {"delay": 0.8}}) for n in (a, b)]
            for thread in both:
                thread.start()
            for thread in both:
                thread.join(60)
            # the bus: a purge on A reaches B
            key = first.headers["x-cache-key"]
            assert httpx_delete(a.url, key) == 204
            until(lambda: b.counters().get("bus_news_applied", 0) > 0, 10, "B applying news")
            # a damaged Redis copy: counted, removed, and B reads the take from S3
            third = a.speak("Platform three.")
            name = f"{prefix}{{{third.headers['x-cache-key']}}}:entry:audio"
            until(lambda: raw_redis(redis_url).exists(name), 10, "the take in Redis")
            raw_redis(redis_url).set(name, b"not an entry")
            assert b.speak("Platform three.").headers["x-cache-tier"] == "s3"
            # the stage caches
            exercise_stage_cache(a.cache_dir)
            # the edge: a miss rendered at the center, one stored there, then the center gone
            assert edge.speak("Gate four.").headers["x-cache"] == "MISS"
            assert center.speak("Gate five.").status_code == 200
            assert edge.speak("Gate five.").status_code == 200
            center.process.terminate()
            center.process.wait(30)
            for text in ("Gate six.", "Gate seven."):
                assert edge.speak(text).headers["x-cache"] == "FALLBACK"

            missing = {}
            for title, exprs in expressions.items():
                for expr in exprs:
                    concrete = expr.replace("$__rate_interval", "1m").replace("$instance", ".*")
                    try:
                        until(lambda c=concrete: prom.query(c)["result"], 30, title)
                    except AssertionError:
                        missing[title] = concrete
            assert missing == {}, missing


def httpx_delete(url: str, key: str) -> int:
    import httpx

    return httpx.delete(f"{url}/v1/entries/{key}", timeout=30).status_code
