"""Tier reads and remote round trips per miss and per hit, counted where they happen.

    python -m bench.probes.round_trips [--misses N]

Runs the asyncio path the service uses (``CachedEngine.take``) over a cache with every
tier — memory, disk, Redis and S3 on their own freshly started servers — and the tone
engine, and counts per request: reads of each tier (the tiers' own counters), Redis
commands as they crossed the wire (a counting proxy in front of redis-server: leases and
the bus included; the bus's background reads, not caused by requests, are left out) and
S3 requests (every HTTP request boto3 sent, by method). Misses are
measured after the publisher has finished, so a row holds everything one request caused.

It imports whichever voxcache is on ``sys.path``: run it once per tree to compare
(``PYTHONPATH=../old/src python -m bench.probes.round_trips``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest
from voxcache.testing.proxies import SlowRedisProxy
from voxcache.testing.servers import MotoS3Server, RedisServer

from ..suite.remote_tiers import missing_parts

BACKGROUND = {"xread", "xrange", "xrevrange", "hello", "ping", "info", "client", "select"}
"""Commands no request causes: the bus's follower, connection set-up, health checks."""


def _tier_reads(cache: Cache) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for name in ("redis", "s3"):
        tier = cache.tiers.by_name(name)
        if tier is None:
            continue
        inner = getattr(tier, "inner", tier)  # a write-behind wrapper in older trees
        got = inner.stats()["counts"]
        counts[f"{name} reads"] = got.get("hits", 0) + got.get("misses", 0)
    return counts


def _settle(cache: Cache) -> None:
    """Until nothing waits to be written to the shared tiers."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        queues = [tier.get("write_queue", {}) for tier in cache.stats()["tiers"].values()
                  if isinstance(tier, dict)]
        if all(q.get("busy", q.get("entries", 0)) == 0 for q in queues):
            time.sleep(0.05)  # a write in progress (older trees do not count it)
            return
        time.sleep(0.01)


def measure(misses: int) -> dict[str, dict[str, float]]:
    """Per-request averages for misses and for hits from each tier."""
    import os

    work = Path(tempfile.mkdtemp(prefix="vx-trips-"))
    with RedisServer(work / "redis") as redis_server, MotoS3Server() as s3, \
            SlowRedisProxy(redis_server.port, delay=0) as proxy:
        os.environ.update(s3.env)
        bucket = f"trips-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(bucket)
        tiers = ("memory", "disk", proxy.url, f"s3://{bucket}/p")
        s3_requests: collections.Counter[str] = collections.Counter()

        def open_cache(folder: str) -> Cache:
            cache = Cache(work / folder, CacheConfig(tiers=tiers))
            s3_tier = cache.tiers.by_name("s3")
            client = getattr(s3_tier, "inner", s3_tier)._s3
            client.meta.events.register(
                "before-send.s3", lambda request, **_: s3_requests.update(
                    [request.method]))
            return cache

        def counted(cache: Cache, ask: Any) -> collections.Counter[str]:
            before = (collections.Counter(proxy.commands), _tier_reads(cache),
                      collections.Counter(s3_requests))
            ask()
            _settle(cache)
            after = (collections.Counter(proxy.commands), _tier_reads(cache),
                     collections.Counter(s3_requests))
            delta: collections.Counter[str] = collections.Counter()
            delta.update({f"redis {k}": v for k, v in (after[0] - before[0]).items()
                          if k not in BACKGROUND})
            delta.update(after[1] - before[1])
            delta.update({f"s3 {k}": v for k, v in (after[2] - before[2]).items()})
            return delta

        rows: dict[str, dict[str, float]] = {}
        node = open_cache("node")
        cached = CachedEngine(ToneEngine(), node)
        texts = [f"Miss number {n} is a new sentence." for n in range(misses)]

        def take(engine: CachedEngine, text: str) -> None:
            asyncio.run(engine.take(SynthesisRequest(text), timeout=60))

        totals: collections.Counter[str] = collections.Counter()
        for text in texts:
            totals.update(counted(node, lambda t=text: take(cached, t)))
        rows["miss"] = {k: v / misses for k, v in totals.items()}
        for tier, opener in (("memory", lambda: node), ("disk", lambda: _reopened(node, work)),
                             ("redis", lambda: open_cache("other")),
                             ("s3", lambda: _without_redis(work, tiers, s3_requests,
                                                           proxy.url))):
            cache = opener()
            engine = CachedEngine(ToneEngine(), cache)
            totals = collections.Counter()
            for text in texts:
                totals.update(counted(cache, lambda t=text, e=engine: take(e, t)))
            rows[f"hit ({tier})"] = {k: v / misses for k, v in totals.items()}
            if cache is not node:
                cache.close()
        node.close()
    return rows


def _reopened(node: Cache, work: Path) -> Cache:
    """The node's folder opened by a second process (its memory is empty)."""
    return Cache(work / "node", CacheConfig(tiers=("memory", "disk")))


def _without_redis(work: Path, tiers: tuple[str, ...], s3_requests: Any,
                   redis_url: str) -> Cache:
    """A node whose Redis holds nothing of these keys (another prefix): S3 answers."""
    cache = Cache(work / "third", CacheConfig(tiers=(*tiers[:2], f"{redis_url}?prefix=none:",
                                                     tiers[3])))
    s3_tier = cache.tiers.by_name("s3")
    client = getattr(s3_tier, "inner", s3_tier)._s3
    client.meta.events.register("before-send.s3",
                                lambda request, **_: s3_requests.update([request.method]))
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--misses", type=int, default=50)
    args = parser.parse_args()
    missing = missing_parts()
    if missing is not None:
        raise SystemExit(missing)
    rows = measure(args.misses)
    columns = sorted({name for row in rows.values() for name in row})
    print("| request | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for label, row in rows.items():
        print(f"| {label} | " + " | ".join(f"{row.get(c, 0):.2f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
