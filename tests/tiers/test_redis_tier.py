"""The Redis tier against a real redis-server: what it stores, what it refuses, and how it
behaves when Redis is damaged, full, frozen or gone."""

from __future__ import annotations

import os
import signal
import time

import pytest

from voxcache.errors import TierUnavailable
from voxcache.testing.servers import RedisServer
from voxcache.testing.tier_contract import make_audio_entry, make_blob_entry
from voxcache.tiers.redis import RedisTier

from .conftest import flip_byte, raw_redis


@pytest.fixture
def tier(redis_server: RedisServer, prefix: str):
    tier = RedisTier.from_url(redis_server.url, prefix=prefix)
    yield tier
    tier.close()


def test_the_value_is_the_stored_file_under_a_hash_tagged_key(tier, redis_server, prefix):
    entry = make_audio_entry(1, ttl=60)
    assert tier.put(entry)
    client = raw_redis(redis_server.url)
    name = f"{prefix}{{{entry.header.key}}}:entry:audio"
    assert client.get(name) == entry.blob  # the WAV file itself: no pickle, no wrapper
    assert entry.blob[:4] == b"RIFF"
    assert 59_000 < client.pttl(name) <= 60_000  # PX from the envelope's expiry
    assert tier.keys.lease(entry.header.key) == f"{prefix}{{{entry.header.key}}}:lease"


def test_an_entry_without_ttl_has_no_redis_expiry(tier, redis_server):
    entry = make_audio_entry(2)
    assert tier.put(entry)
    assert raw_redis(redis_server.url).pttl(tier.keys.entry(entry.header.key, "audio")) == -1


def test_a_flipped_byte_is_a_miss_counted_and_deleted(tier, redis_server):
    entry = make_audio_entry(3)
    tier.put(entry)
    client = raw_redis(redis_server.url)
    name = tier.keys.entry(entry.header.key, "audio")
    for at in range(0, entry.size, max(1, entry.size // 150)):  # ~150 places, header to tail
        client.set(name, flip_byte(entry.blob, at))
        assert tier.get(entry.header.key) is None, f"served a flip at byte {at}"
        assert client.get(name) is None, f"left the damaged value (flip at {at})"
    assert tier.stats()["counts"]["corruptions"] >= 150


def test_garbage_of_another_redis_type_is_a_miss_and_removed(tier, redis_server):
    entry = make_audio_entry(4)
    client = raw_redis(redis_server.url)
    name = tier.keys.entry(entry.header.key, "audio")
    client.hset(name, "field", "value")  # WRONGTYPE for GET
    assert tier.get(entry.header.key) is None
    assert not client.exists(name)
    client.rpush(name, "x")
    assert tier.put(entry)  # a put clears it too
    assert tier.get(entry.header.key).blob == entry.blob


def test_the_first_writer_wins(tier):
    first = make_audio_entry(5)
    second = make_audio_entry(5)  # the same key rendered again elsewhere: other bytes
    assert first.blob != second.blob
    assert tier.put(first) and tier.put(second)
    assert tier.get(first.header.key).blob == first.blob


def test_a_bad_value_in_the_way_gives_way_to_a_put(tier, redis_server):
    entry = make_audio_entry(6)
    client = raw_redis(redis_server.url)
    name = tier.keys.entry(entry.header.key, "audio")
    client.set(name, flip_byte(entry.blob))
    assert tier.put(entry)
    assert client.get(name) == entry.blob


def test_an_envelope_expired_by_the_clock_is_a_miss_even_if_redis_keeps_it(
        redis_server, prefix):
    entry = make_audio_entry(7, ttl=60)
    writer = RedisTier.from_url(redis_server.url, prefix=prefix)
    late = RedisTier.from_url(redis_server.url, prefix=prefix, clock=lambda: time.time() + 61)
    try:
        assert writer.put(entry)
        assert writer.get(entry.header.key) is not None
        assert late.get(entry.header.key) is None  # a node whose clock is ahead
    finally:
        writer.close()
        late.close()


def _calls(client, command: str) -> int:
    return client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)


def test_names_voxcache_never_makes_are_refused_without_a_call(tier, redis_server):
    entry = make_audio_entry(8)
    client = raw_redis(redis_server.url)
    before = _calls(client, "get"), _calls(client, "exists")
    for key, kind in (("../../x", "audio"), ("0" * 64 + "}", "audio"), ("A" * 64, "audio"),
                      (entry.header.key, "Audio"), (entry.header.key, "pointer"),
                      (entry.header.key, "a:b")):
        assert tier.get(key, kind) is None
        assert tier.contains(key, kind) is False
    assert tier.stats()["counts"]["refused_names"] == 6  # get() counts; contains() is silent
    assert (_calls(client, "get"), _calls(client, "exists")) == before  # nothing was sent


def test_large_entries_without_an_object_tier_are_not_stored(tier):
    big = make_audio_entry(9, frames=200_000)  # 400 KB > 256 KB inline
    assert tier.put(big) is None
    assert tier.get(big.header.key) is None
    assert tier.stats()["counts"]["too_large"] == 1


def test_delete_of_every_kind(tier):
    audio = make_audio_entry(10)
    encoded = make_blob_entry(10)
    assert audio.header.key == encoded.header.key
    tier.put(audio)
    tier.put(encoded)
    assert tier.delete(audio.header.key, None) is True
    assert tier.get(audio.header.key) is None
    assert tier.get(audio.header.key, "encoded") is None


def test_a_full_redis_refuses_the_write_and_still_serves(fresh_redis):
    fresh_redis.cli("CONFIG", "SET", "maxmemory", "2mb")
    fresh_redis.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    tier = RedisTier.from_url(fresh_redis.url)
    try:
        small = make_audio_entry(11)
        assert tier.put(small)
        stored = 0
        for i in range(100, 130):  # ~230 KB each: Redis fills up within a few
            stored += tier.put(make_audio_entry(i, frames=115_000)) is not None
        assert 0 < stored < 30
        assert tier.stats()["counts"]["full_errors"] >= 1
        assert tier.get(small.header.key).blob == small.blob  # reads go on
    finally:
        tier.close()


def test_a_frozen_redis_answers_within_the_bound(fresh_redis):
    """SIGSTOP: the server accepts connections but never answers. A read must give up within
    (retries + 1) × (connect_timeout + timeout) + back-off = 2 × (0.2 + 0.3) + 0.1 = 1.1 s."""
    tier = RedisTier.from_url(fresh_redis.url, timeout=0.3, connect_timeout=0.2, retries=1)
    entry = make_audio_entry(12)
    assert tier.put(entry)
    assert fresh_redis.process is not None
    os.kill(fresh_redis.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(TierUnavailable, match="Timeout"):
            tier.get(entry.header.key)
        assert time.monotonic() - started < 3.0  # the bound is 1.1 s; generous margin
        assert tier.health().state == "down"
    finally:
        os.kill(fresh_redis.process.pid, signal.SIGCONT)
    assert tier.get(entry.header.key).blob == entry.blob  # the same tier object, again
    assert tier.health().state == "ok"
    tier.close()


def test_a_killed_redis_raises_quickly_and_is_used_again_after_a_restart(fresh_redis):
    tier = RedisTier.from_url(fresh_redis.url)
    entry = make_audio_entry(13)
    assert tier.put(entry)
    fresh_redis.kill()
    started = time.monotonic()
    with pytest.raises(TierUnavailable):
        tier.get(entry.header.key)
    with pytest.raises(TierUnavailable):
        tier.put(entry)
    assert time.monotonic() - started < 3.0  # refused connections: no timeout to wait out
    assert tier.health().state == "down"
    fresh_redis.start()  # same port, empty (nothing is persisted)
    assert tier.get(entry.header.key) is None
    assert tier.put(entry)
    assert tier.get(entry.header.key).blob == entry.blob
    assert tier.health().state == "ok"
    tier.close()


def test_a_redis_down_at_start_is_used_once_it_comes_up(tmp_path):
    server = RedisServer(tmp_path)  # port chosen, not started
    tier = RedisTier.from_url(server.url)  # making the tier needs no server
    entry = make_audio_entry(14)
    with pytest.raises(TierUnavailable):
        tier.get(entry.header.key)
    server.start()
    try:
        assert tier.put(entry)
        assert tier.get(entry.header.key).blob == entry.blob
    finally:
        tier.close()
        server.kill()
