"""Shared tiers: a Redis-tier and an S3-tier hit against the bare client fetching the same bytes.

``python -m bench.suite.remote_tiers`` (or ``--quick``) prints the table; it also follows the
suite's module shape (``NAME``, ``TITLE``, ``run(ctx)``) so it can join ``bench.suite.registry``.

Servers are started here on free ports (``voxcache.testing.servers``): a redis-server keeping
nothing on disk and moto's S3 server (a Python process on the same two cores, so its figures
are moto's, not S3's). Each pair is measured call by call in alternation (bare, tier, bare,
tier…) so both see the same machine. What the tier adds to the bare call: building the Redis
key, the envelope check (XXH3-128 over every byte, the layout rebuilt and compared), and for a
pointer a second round trip (Redis, then S3) plus the pointer's own digest check.
Goal (issue 11): a remote hit within 1.2× of the bare client.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voxcache.testing.servers import MotoS3Server, RedisServer, redis_available

from ..helpers.core import Context, Stats, ratio
from ..helpers.fixtures import entry_of_size

NAME = "remote_tiers"
TITLE = "Shared tiers: Redis and S3 hits against the bare clients"
SIZES = {"200 KB": 200_000, "2 MB": 2_000_000}


def paired(bare: Callable[[], Any], tier: Callable[[], Any], repeats: int,
           warmup: int = 5) -> tuple[Stats, Stats]:
    """Time two calls in alternation; each sample is one call."""
    for _ in range(warmup):
        bare()
        tier()
    clock = time.perf_counter
    bare_samples, tier_samples = [], []
    for _ in range(repeats):
        started = clock()
        bare()
        middle = clock()
        tier()
        tier_samples.append(clock() - middle)
        bare_samples.append(middle - started)
    return Stats.of(bare_samples), Stats.of(tier_samples)


def measure(ctx: Context, work: Path) -> list[dict[str, Any]]:
    """Every pair, on freshly started servers."""
    import boto3
    from redis import Redis

    from voxcache.tiers.redis import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, RedisTier
    from voxcache.tiers.s3 import S3Tier

    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        redis_server = stack.enter_context(RedisServer(work))
        s3_server = stack.enter_context(MotoS3Server())
        os.environ.update(s3_server.env)
        s3_server.create_bucket("bench")
        bare_redis = Redis.from_url(redis_server.url)
        timed_redis = Redis.from_url(redis_server.url, socket_timeout=DEFAULT_TIMEOUT,
                                     socket_connect_timeout=DEFAULT_CONNECT_TIMEOUT)
        bare_s3 = boto3.session.Session().client("s3")
        s3 = S3Tier.from_url("s3://bench/cache")
        inline = RedisTier.from_url(redis_server.url, prefix="inline:", inline_limit=4_000_000)
        pointing = RedisTier.from_url(redis_server.url, prefix="ptr:", inline_limit=0,
                                      object_store=s3)
        for tier in (s3, inline, pointing):
            stack.callback(tier.close)
        for number, (label, size) in enumerate(SIZES.items()):
            entry = entry_of_size(f"{number + 1:064x}", size)
            key = entry.header.key
            assert inline.put(entry) and pointing.put(entry)  # pointing also fills S3
            redis_name = inline.keys.entry(key, "audio")
            object_name = s3.object_name(key, "audio")
            assert inline.get(key).blob == bare_redis.get(redis_name) == entry.blob
            assert pointing.get(key).blob == entry.blob == s3.get(key).blob

            def s3_bare(name: str = object_name) -> bytes:
                return bare_s3.get_object(Bucket="bench", Key=name)["Body"].read()

            redis_n = ctx.pick(50, 400) if size < 1_000_000 else ctx.pick(30, 200)
            s3_n = ctx.pick(20, 150) if size < 1_000_000 else ctx.pick(10, 60)
            pairs = {
                "Redis (inline)": (lambda n=redis_name: bare_redis.get(n),
                                   lambda k=key: inline.get(k), redis_n, "redis-py GET"),
                "Redis (inline) ": (lambda n=redis_name: timed_redis.get(n),
                                    lambda k=key: inline.get(k), redis_n,
                                    "GET, tier timeouts"),
                "S3": (s3_bare, lambda k=key: s3.get(k), s3_n, "boto3 get_object"),
                "Redis pointer → S3": (s3_bare, lambda k=key: pointing.get(k), s3_n,
                                       "boto3 get_object"),
            }
            for subject, (bare, tier_call, n, bare_name) in pairs.items():
                bare_stats, tier_stats = paired(bare, tier_call, n)
                rows.append({"size": label, "tier": subject.strip(), "bare client": bare_name,
                             "bare median ms": bare_stats.median * 1e3,
                             "tier median ms": tier_stats.median * 1e3,
                             "× bare (median)": ratio(tier_stats.median, bare_stats.median),
                             "bare p99 ms": bare_stats.p99 * 1e3,
                             "tier p99 ms": tier_stats.p99 * 1e3, "n": n})
        bare_redis.close()
        timed_redis.close()
    return rows


def missing_parts() -> str | None:
    """Why the shared-tier benchmarks (this one and ``cluster``) cannot run here (None: they
    can): a redis-server to start, the [shared] extra, moto's server and httpx."""
    if not redis_available():
        return "redis-server is not installed (Debian package redis-server); skipped"
    try:
        import boto3  # noqa: F401
        import httpx  # noqa: F401
        import moto  # noqa: F401
        import redis  # noqa: F401
    except ImportError:
        return "needs the [shared] extra and moto[server] ([test] extra); skipped"
    return None


def run(ctx: Context) -> None:
    """Measure, record the table, print it."""
    missing = missing_parts()
    if missing is not None:
        ctx.note(missing)
        return
    rows = measure(ctx, ctx.scratch("servers"))
    ctx.table("remote_hits", "Remote hits against the bare client (ms, alternating calls)",
              rows, notes=["Goal: × bare ≤ 1.2. The S3 server is moto (Python, same cores).",
                           "'GET, tier timeouts': a bare client with the tier's socket "
                           "timeouts, so the ratio is the verification's cost alone.",
                           "Redis inline here allows 4 MB values (inline_limit) to compare "
                           "a 2 MB hit with a bare GET; the default stores it via a pointer."])
    for row in rows:
        print(f"  {row['size']:>6}  {row['tier']:<20} {row['bare client']:<17} "
              f"bare {row['bare median ms']:7.3f} ms   tier {row['tier median ms']:7.3f} ms"
              f"   × {row['× bare (median)']:.2f}   (p99 {row['bare p99 ms']:.3f} / "
              f"{row['tier p99 ms']:.3f} ms, n={row['n']})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.suite.remote_tiers", description=TITLE)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="voxcache-bench-") as work:
        ctx = Context(quick=args.quick, out=Path(work), work=Path(work), current=NAME)
        run(ctx)


if __name__ == "__main__":
    main()
