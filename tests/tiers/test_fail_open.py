"""Fail open through ``TierStack``: Redis or S3 killed while the stack is in use costs
misses of that tier, never an exception or a wrong answer, and the same tier objects are
used again once the servers are back."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from voxcache.testing.servers import MotoS3Server, RedisServer
from voxcache.testing.tier_contract import make_audio_entry
from voxcache.tiers.base import TierStack
from voxcache.tiers.faults import FaultLog
from voxcache.tiers.memory import MemoryTier
from voxcache.tiers.redis import DEFAULT_RETRIES, RedisTier
from voxcache.tiers.remote import Counters
from voxcache.tiers.s3 import DEFAULT_ATTEMPTS, S3Tier

from .cluster.conftest import until
from .conftest import raw_redis

log = logging.getLogger("test.fail_open")
CONNECT_TIMEOUT, REDIS_TIMEOUT, S3_TIMEOUT = 0.3, 0.5, 1.0


class Clock:
    """A monotonic clock the test can move forward past the breaker's back-off."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def _stack(redis_url: str, bucket: str, memory: MemoryTier, clock=time.monotonic):
    redis = RedisTier.from_url(redis_url, timeout=REDIS_TIMEOUT, connect_timeout=CONNECT_TIMEOUT)
    s3 = S3Tier.from_url(f"s3://{bucket}/x", timeout=S3_TIMEOUT, connect_timeout=CONNECT_TIMEOUT)
    counts = Counters()
    return TierStack([memory, redis, s3], FaultLog(log, counts.count), clock=clock), counts


def _timeouts_allow() -> float:
    """The longest a read-and-store may take when every call is cut off by its timeouts
    (no call hangs): the get and the put each reach Redis (retries + 1 attempts, ≤0.1 s
    apart) and S3 (``attempts``, botocore's standard back-off ≤1 s apart), and a read's
    body comes within the read timeout. A call without a timeout hangs for 60 s (boto's
    default) or for ever (redis-py's)."""
    redis = (DEFAULT_RETRIES + 1) * (CONNECT_TIMEOUT + REDIS_TIMEOUT) + 0.1 * DEFAULT_RETRIES
    s3 = DEFAULT_ATTEMPTS * (CONNECT_TIMEOUT + S3_TIMEOUT) + 1.0 * (DEFAULT_ATTEMPTS - 1)
    return 2 * (redis + s3) + S3_TIMEOUT


def _timed(stack: TierStack) -> threading.local:
    """Record each tier call's duration in the calling thread's ``calls``, so that a slow
    read-and-store says which call took the time."""
    record = threading.local()

    def timed(call: Callable[..., Any], name: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return call(*args, **kwargs)
            finally:
                getattr(record, "calls", []).append((name, round(time.monotonic() - started, 3)))
        return run

    for tier in stack.tiers:
        for operation in ("get", "put", "replace"):
            setattr(tier, operation, timed(getattr(tier, operation), f"{tier.name}.{operation}"))
    return record


def test_a_redis_outage_is_served_from_the_other_tiers(fresh_redis: RedisServer, bucket,
                                                      s3_env):
    clock = Clock()
    memory = MemoryTier()
    stack, counts = _stack(fresh_redis.url, bucket, memory, clock)
    a, b, c = (make_audio_entry(i) for i in (1, 2, 3))
    assert stack.put(a)
    fresh_redis.kill()
    memory.clear()
    started = time.monotonic()
    found = stack.get(a.header.key)
    assert found is not None and found[1] == "s3" and found[0].blob == a.blob
    for _ in range(3):
        assert stack.get(c.header.key) is None  # misses, no exception
    assert time.monotonic() - started < 5.0  # refused connections fail at once
    assert stack.health()["redis"].state == "down"
    assert counts.snapshot()["tier_redis_errors"] >= 3
    assert stack.put(b) is not None  # S3 is durable: the take is stored
    fresh_redis.start()  # empty, same port, same tier object
    clock.offset += 60  # past the breaker's back-off: the next call is the probe
    assert stack.put(c) is not None
    assert raw_redis(fresh_redis.url).exists(stack.tiers[1].keys.entry(c.header.key, "audio"))
    memory.clear()
    assert stack.get(c.header.key)[1] == "redis"
    assert stack.health()["redis"].state == "ok"


def test_an_s3_outage_is_served_from_the_other_tiers(redis_server: RedisServer,
                                                    fresh_s3: MotoS3Server):
    fresh_s3.create_bucket("outage")
    clock = Clock()
    memory = MemoryTier()
    stack, _ = _stack(redis_server.url, "outage", memory, clock)
    redis = stack.tiers[1]
    redis.keys = type(redis.keys)(f"s3outage{random.randrange(10**9)}:")
    a, b = make_audio_entry(4), make_audio_entry(5)
    assert stack.put(a)
    fresh_s3.kill()
    memory.clear()
    assert stack.get(a.header.key)[1] == "redis"
    for _ in range(3):
        assert stack.get(b.header.key) is None
    assert stack.health()["s3"].state == "down"
    assert stack.put(b) is not None  # Redis is durable enough to count as stored
    fresh_s3.start()
    fresh_s3.create_bucket("outage")  # moto forgets its buckets on a restart
    clock.offset += 60
    assert stack.put(b) is not None
    assert stack.tiers[2].contains(b.header.key)
    assert stack.health()["s3"].state == "ok"


def test_a_load_run_through_killed_and_restarted_servers(fresh_redis: RedisServer,
                                                         fresh_s3: MotoS3Server):
    """Four threads read (and store what they miss) while Redis and then S3 are killed and
    restarted; the memory tier is small, so most reads reach the shared tiers."""
    fresh_s3.create_bucket("load")
    memory = MemoryTier(default_budget=40_000)
    stack, counts = _stack(fresh_redis.url, "load", memory)
    entries = [make_audio_entry(100 + i) for i in range(40)]
    problems: list[str] = []
    tiers_seen: dict[str, int] = {}
    record = _timed(stack)
    slowest: list = [0.0, []]
    stop = threading.Event()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            entry = rng.choice(entries)
            started = time.monotonic()
            record.calls = []
            try:
                found = stack.get(entry.header.key)
                if found is None:
                    stack.put(entry)
                elif found[0].blob != entry.blob:
                    problems.append(f"wrong bytes for {entry.header.key[:8]} from {found[1]}")
                else:
                    tiers_seen[found[1]] = tiers_seen.get(found[1], 0) + 1
            except Exception as exc:  # the stack must never raise
                problems.append(f"{type(exc).__name__}: {exc}")
            took = time.monotonic() - started
            if took > slowest[0]:
                slowest[:] = took, record.calls

    def served_while(condition: str, tier: str) -> None:
        """Wait until ``tier`` answers a read (it was not before): each phase lasts until
        the load has gone through it, however slow a loaded machine makes the calls (40 s:
        a breaker opened by a slow call retries by then)."""
        before = tiers_seen.get(tier, 0)
        until(lambda: tiers_seen.get(tier, 0) > before, 40, f"a read {tier} served {condition}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    try:
        served_while("before the kills", "redis")
        fresh_redis.kill()
        served_while("while Redis was down", "s3")
        fresh_s3.kill()
        time.sleep(0.5)
        fresh_redis.start()
        time.sleep(0.5)
        fresh_s3.start()
        fresh_s3.create_bucket("load")
        deadline = time.monotonic() + 40  # the breaker's back-off doubles up to 30 s
        while time.monotonic() < deadline and not all(
                health.state == "ok" for health in stack.health().values()):
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert problems == []
    faults = counts.snapshot()
    assert faults["tier_redis_errors"] > 0 and faults["tier_s3_errors"] > 0  # the kills hit
    assert slowest[0] < _timeouts_allow(), f"a read-and-store took {slowest[0]:.2f} s: " \
        f"{slowest[1]}"  # 11.6 s: every call was cut off by its timeouts, none hung
    assert stack.health()["redis"].state == "ok" and stack.health()["s3"].state == "ok"
    assert "memory" in tiers_seen
    late = make_audio_entry(999)
    assert stack.put(late)  # both servers are used again, by the same tier objects
    assert raw_redis(fresh_redis.url).exists(stack.tiers[1].keys.entry(late.header.key,
                                                                          "audio"))
    assert stack.tiers[2].contains(late.header.key)
