"""Fail open through ``TierStack``: Redis or S3 killed while the stack is in use costs
misses of that tier, never an exception or a wrong answer, and the same tier objects are
used again once the servers are back."""

from __future__ import annotations

import logging
import random
import threading
import time

from voxcache.testing.servers import MotoS3Server, RedisServer
from voxcache.testing.tier_contract import make_audio_entry
from voxcache.tiers.base import TierStack
from voxcache.tiers.faults import FaultLog
from voxcache.tiers.memory import MemoryTier
from voxcache.tiers.redis import RedisTier
from voxcache.tiers.remote import Counters
from voxcache.tiers.s3 import S3Tier

from .cluster.conftest import until
from .conftest import raw_redis

log = logging.getLogger("test.fail_open")


class Clock:
    """A monotonic clock the test can move forward past the breaker's back-off."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def _stack(redis_url: str, bucket: str, memory: MemoryTier, clock=time.monotonic):
    redis = RedisTier.from_url(redis_url, timeout=0.5, connect_timeout=0.3)
    s3 = S3Tier.from_url(f"s3://{bucket}/x", timeout=1.0, connect_timeout=0.3)
    counts = Counters()
    return TierStack([memory, redis, s3], FaultLog(log, counts.count), clock=clock), counts


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
    slowest = [0.0]
    stop = threading.Event()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            entry = rng.choice(entries)
            started = time.monotonic()
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
            slowest[0] = max(slowest[0], time.monotonic() - started)

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
    assert slowest[0] < 5.0  # connect 0.3 s, read 0.5/1 s, one retry: a call never hangs
    assert stack.health()["redis"].state == "ok" and stack.health()["s3"].state == "ok"
    assert "memory" in tiers_seen
    late = make_audio_entry(999)
    assert stack.put(late)  # both servers are used again, by the same tier objects
    assert raw_redis(fresh_redis.url).exists(stack.tiers[1].keys.entry(late.header.key,
                                                                          "audio"))
    assert stack.tiers[2].contains(late.header.key)
