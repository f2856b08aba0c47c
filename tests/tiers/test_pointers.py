"""Large entries: stored in S3, named by a verified pointer in Redis. What the pointer
promises (exactly that object, for exactly that key and kind) and what happens when the
pointer or its object is damaged, replaced, gone or unreachable."""

from __future__ import annotations

import pytest

from voxcache.entry import blob_entry
from voxcache.testing.servers import MotoS3Server, RedisServer
from voxcache.testing.tier_contract import make_audio_entry
from voxcache.tiers.redis import POINTER_KIND, RedisTier, pointer_blob
from voxcache.tiers.remote import ObjectRef, blob_digest
from voxcache.tiers.s3 import S3Tier

from .conftest import flip_byte, raw_redis

BIG_FRAMES = 1_000_000  # 2 MB of 16-bit samples


@pytest.fixture
def s3(bucket: str):
    tier = S3Tier.from_url(f"s3://{bucket}/big")
    yield tier
    tier.close()


@pytest.fixture
def tier(redis_server: RedisServer, s3: S3Tier, prefix: str):
    tier = RedisTier.from_url(redis_server.url, prefix=prefix, object_store=s3)
    yield tier
    tier.close()


def _stored(server: MotoS3Server, s3: S3Tier, key: str) -> bytes:
    name = s3.object_name(key, "audio")
    return server.client().get_object(Bucket=s3.bucket, Key=name)["Body"].read()


def test_a_large_entry_goes_to_s3_and_reads_back_byte_for_byte(tier, s3, s3_env,
                                                               redis_server):
    big = make_audio_entry(1, frames=BIG_FRAMES, ttl=600)
    small = make_audio_entry(2)
    assert big.size > tier.inline_limit >= small.size
    assert tier.put(big) and tier.put(small)
    client = raw_redis(redis_server.url)
    pointer = client.get(tier.keys.entry(big.header.key, "audio"))
    assert len(pointer) < 1024 and pointer[:4] == b"VXCB"  # a tiny record, not the take
    assert client.get(tier.keys.entry(small.header.key, "audio")) == small.blob  # inline
    assert _stored(s3_env, s3, big.header.key) == big.blob  # the WAV itself, in S3
    assert 599_000 < client.pttl(tier.keys.entry(big.header.key, "audio")) <= 600_000
    got = tier.get(big.header.key)
    assert got is not None and got.blob == big.blob and got.header == big.header
    assert tier.stats()["counts"]["pointer_hits"] == 1


def test_a_damaged_pointer_is_a_miss_and_removed(tier, s3, s3_env, redis_server):
    big = make_audio_entry(3, frames=BIG_FRAMES)
    tier.put(big)
    client = raw_redis(redis_server.url)
    name = tier.keys.entry(big.header.key, "audio")
    pointer = client.get(name)
    for at in range(0, len(pointer), 7):
        client.set(name, flip_byte(pointer, at))
        assert tier.get(big.header.key) is None, f"followed a pointer flipped at {at}"
        assert client.get(name) is None
    assert _stored(s3_env, s3, big.header.key) == big.blob  # the object is not the fault


def test_a_damaged_object_behind_a_pointer_is_a_miss_and_both_go(tier, s3, s3_env,
                                                                 redis_server):
    big = make_audio_entry(4, frames=BIG_FRAMES)
    tier.put(big)
    s3_env.client().put_object(Bucket=s3.bucket, Key=s3.object_name(big.header.key, "audio"),
                               Body=flip_byte(big.blob, big.size - 3))
    assert tier.get(big.header.key) is None
    assert raw_redis(redis_server.url).get(tier.keys.entry(big.header.key, "audio")) is None
    assert s3.stats()["counts"]["corruptions"] == 1
    assert tier.put(big)  # and it can be stored again
    assert tier.get(big.header.key).blob == big.blob


def test_a_pointer_to_a_replaced_object_is_stale(tier, s3, s3_env):
    """The object was replaced by another valid take of the key: the pointer vouches for
    one object only, so it is a miss (the S3 tier itself still serves its verified take)."""
    big, other_take = make_audio_entry(5, frames=BIG_FRAMES), make_audio_entry(5, frames=10)
    tier.put(big)
    s3_env.client().put_object(Bucket=s3.bucket, Key=s3.object_name(big.header.key, "audio"),
                               Body=other_take.blob)
    assert tier.get(big.header.key) is None
    assert tier.stats()["counts"]["stale_pointers"] == 1
    assert s3.get(big.header.key).blob == other_take.blob


def test_a_pointer_whose_object_is_gone_is_removed(tier, s3, s3_env, redis_server):
    big = make_audio_entry(6, frames=BIG_FRAMES)
    tier.put(big)
    s3_env.client().delete_object(Bucket=s3.bucket, Key=s3.object_name(big.header.key,
                                                                       "audio"))
    assert tier.get(big.header.key) is None
    assert raw_redis(redis_server.url).get(tier.keys.entry(big.header.key, "audio")) is None
    assert tier.put(big) and tier.get(big.header.key).blob == big.blob


def test_a_forged_pointer_cannot_send_a_read_elsewhere(tier, s3, redis_server):
    """A well-formed, correctly sealed pointer for key A that names key B's object (or
    another kind's, or claims another kind) is refused: the name must be A's own."""
    a, b = make_audio_entry(7, frames=BIG_FRAMES), make_audio_entry(8, frames=BIG_FRAMES)
    tier.put(b)
    b_name = s3.object_name(b.header.key, "audio")
    client = raw_redis(redis_server.url)
    name = tier.keys.entry(a.header.key, "audio")
    forged = [
        pointer_blob(a, ObjectRef(b_name, b.size, blob_digest(b.blob))),
        pointer_blob(a, ObjectRef(s3.object_name(a.header.key, "encoded"), 1, "00")),
        blob_entry(a.header.key, POINTER_KIND, b'{"kind":"encoded","object":"%s","size":1,'
                   b'"xxh3":"00"}' % s3.object_name(a.header.key, "encoded").encode(),
                   "application/json").blob,
        blob_entry(a.header.key, POINTER_KIND, b"[1, 2]", "application/json").blob,
        pointer_blob(b, ObjectRef(b_name, b.size, blob_digest(b.blob))),  # B's own pointer
    ]
    for value in forged:
        client.set(name, value)
        assert tier.get(a.header.key) is None
        assert client.get(name) is None
    assert tier.stats()["counts"]["corruptions"] == len(forged)


def test_without_an_object_store_a_pointer_is_a_miss(redis_server, prefix, tier):
    big = make_audio_entry(9, frames=BIG_FRAMES)
    tier.put(big)
    alone = RedisTier.from_url(redis_server.url, prefix=prefix)  # a node without S3
    try:
        assert alone.get(big.header.key) is None
        assert alone.stats()["counts"]["pointers_without_store"] == 1
    finally:
        alone.close()
    assert tier.get(big.header.key).blob == big.blob  # the pointer was left for others


def test_an_s3_outage_is_a_miss_of_the_redis_tier_not_an_error(redis_server, fresh_s3,
                                                               prefix):
    fresh_s3.create_bucket("pointed")
    s3 = S3Tier.from_url("s3://pointed/x", attempts=1)
    tier = RedisTier.from_url(redis_server.url, prefix=prefix, object_store=s3)
    big, later = make_audio_entry(10, frames=BIG_FRAMES), make_audio_entry(11,
                                                                            frames=BIG_FRAMES)
    assert tier.put(big)
    fresh_s3.kill()
    assert tier.get(big.header.key) is None  # no exception: Redis itself is fine
    assert tier.put(later) is None  # the object could not be stored: nor is the pointer
    assert tier.stats()["counts"]["object_store_errors"] == 2
    assert tier.health().state == "ok"
    tier.close()


def test_delete_removes_the_object_too(tier, s3, s3_env):
    """A purged take must not come back: a later put would find the old object (first
    writer wins) and point to it again."""
    big = make_audio_entry(12, frames=BIG_FRAMES)
    tier.put(big)
    assert tier.delete(big.header.key) is True
    assert s3.contains(big.header.key) is False
    rerendered = make_audio_entry(12, frames=BIG_FRAMES)
    assert tier.put(rerendered)
    assert tier.get(big.header.key).blob == rerendered.blob


def test_ttl_is_honoured_by_the_pointer_and_the_object(tier, s3, redis_server):
    import time

    big = make_audio_entry(13, frames=BIG_FRAMES, ttl=0.5)
    assert tier.put(big)
    assert tier.get(big.header.key) is not None
    time.sleep(0.7)
    assert raw_redis(redis_server.url).get(tier.keys.entry(big.header.key, "audio")) is None
    assert tier.get(big.header.key) is None
    assert s3.get(big.header.key) is None  # the object's metadata says expired too
    fresh = make_audio_entry(13, frames=BIG_FRAMES)
    assert tier.put(fresh) and tier.get(fresh.header.key).blob == fresh.blob
