"""Writes to the shared tiers go behind a bounded queue that sheds: no caller waits on them.

Against a real Redis that is frozen (SIGSTOP: it accepts connections and never
answers), a take is stored and answered at once while its shared write waits; past the
queue's bound writes are shed and counted, the queue's memory stays bounded, and once
Redis answers again the tier is written to again without a restart. A delete drops the
key's queued write, so a purge cannot be undone by a write that was waiting.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.entry import Entry, audio_entry
from voxcache.testing.servers import RedisServer

from .conftest import needs_redis, raw_redis, until

QUEUE = 300_000


@pytest.fixture
def frozen_redis(tmp_path: Path) -> Iterator[RedisServer]:
    needs_redis()
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    if server.process is not None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.kill()


def _entry(n: int, size: int = 100_000) -> Entry:
    key = f"{n:02x}" * 32
    return audio_entry(key, Audio(bytes([n % 251]) * size, 16000))


def _stored_in(url: str, entry: Entry) -> bool:
    return bool(raw_redis(url).exists(f"vxc:{{{entry.header.key}}}:entry:audio"))


def test_a_frozen_redis_never_holds_a_caller_and_the_queue_sheds(
        tmp_path: Path, frozen_redis: RedisServer) -> None:
    cache = Cache(tmp_path / "cache", CacheConfig(tiers=("memory", "disk", frozen_redis.url),
                                                  shared_write_queue=QUEUE))
    try:
        assert cache.put(_entry(1))
        until(lambda: _stored_in(frozen_redis.url, _entry(1)), what="a write to a live Redis")
        assert frozen_redis.process is not None
        os.kill(frozen_redis.process.pid, signal.SIGSTOP)
        entries = [_entry(n) for n in range(2, 22)]
        for entry in entries:
            started = time.monotonic()
            assert cache.put(entry)  # stored: the disk tier holds it
            assert time.monotonic() - started < 1.0  # one Redis call alone takes 1.6 s here
        queue = cache.stats()["tiers"]["redis"]["write_queue"]
        assert queue["bytes"] <= QUEUE
        assert queue["shed"] >= 10  # 20 writes of 100 KB: a few queued or in flight, the rest
        until(lambda: cache.session_counts().get("redis_writes_shed", 0) == queue["shed"])
        os.kill(frozen_redis.process.pid, signal.SIGCONT)
        late = _entry(40)

        def shared_again() -> bool:
            cache.put(late)  # each try is queued; the breaker lets one through when due
            return _stored_in(frozen_redis.url, late)

        until(shared_again, 45, "Redis written to again after it thawed")
    finally:
        cache.close()


def test_a_delete_drops_the_key_s_queued_write(tmp_path: Path,
                                              frozen_redis: RedisServer) -> None:
    cache = Cache(tmp_path / "cache", CacheConfig(tiers=("memory", "disk", frozen_redis.url)))
    try:
        assert frozen_redis.process is not None
        os.kill(frozen_redis.process.pid, signal.SIGSTOP)
        busy = [_entry(n, 1000) for n in range(50, 54)]  # the four writers, stuck on Redis
        for entry in busy:
            cache.put(entry)
        purged = _entry(60, 1000)
        cache.put(purged)  # queued behind them
        assert cache.stats()["tiers"]["redis"]["write_queue"]["entries"] >= 1
        os.kill(frozen_redis.process.pid, signal.SIGCONT)
        cache.delete(purged.header.key)
        assert cache.stats()["tiers"]["redis"]["write_queue"]["entries"] == 0
        time.sleep(1.0)  # any write left behind would have landed by now
        assert not _stored_in(frozen_redis.url, purged)
    finally:
        cache.close()
