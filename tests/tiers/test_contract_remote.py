"""The shared tiers pass the shipped tier contract against real servers: a single Redis, a
3-master Redis Cluster, moto's S3 server, and Redis holding pointers to S3 objects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voxcache.entry import Entry
from voxcache.testing.servers import MotoS3Server, RedisClusterServers, RedisServer
from voxcache.testing.tier_contract import TierContract
from voxcache.tiers.redis import RedisTier
from voxcache.tiers.s3 import S3Tier

from .conftest import flip_byte, raw_redis


class RedisDamage:
    """Damage and plant through a plain redis-py client, as a stranger with the password
    could."""

    url: str

    def corrupt(self, tier: RedisTier, entry: Entry) -> None:  # type: ignore[override]
        client = raw_redis(self.url)
        name = tier.keys.entry(entry.header.key, entry.header.kind)
        value = client.get(name)
        assert value is not None
        client.set(name, flip_byte(value), keepttl=True)

    def plant(self, tier: RedisTier, key: str, kind: str, blob: bytes) -> None:
        raw_redis(self.url).set(tier.keys.entry(key, kind), blob)


class TestRedisTier(RedisDamage, TierContract):
    @pytest.fixture
    def tier(self, redis_server: RedisServer, prefix: str) -> Iterator[RedisTier]:
        self.url = redis_server.url
        tier = RedisTier.from_url(redis_server.url, prefix=prefix)
        yield tier
        tier.close()


class TestRedisClusterTier(RedisDamage, TierContract):
    @pytest.fixture
    def tier(self, redis_cluster: RedisClusterServers, prefix: str) -> Iterator[RedisTier]:
        self.url = redis_cluster.url
        tier = RedisTier.from_url(redis_cluster.url, prefix=prefix)
        yield tier
        tier.close()


class S3Damage:
    """Damage and plant through a plain boto3 client."""

    server: MotoS3Server

    def s3_tier(self, tier: object) -> S3Tier:
        assert isinstance(tier, S3Tier)
        return tier

    def corrupt(self, tier: object, entry: Entry) -> None:  # type: ignore[override]
        s3 = self.s3_tier(tier)
        client = self.server.client()
        name = s3.object_name(entry.header.key, entry.header.kind)
        stored = client.get_object(Bucket=s3.bucket, Key=name)
        client.put_object(Bucket=s3.bucket, Key=name, Body=flip_byte(stored["Body"].read()),
                          Metadata=stored["Metadata"])


class TestS3Tier(S3Damage, TierContract):
    @pytest.fixture
    def tier(self, s3_env: MotoS3Server, bucket: str) -> Iterator[S3Tier]:
        self.server = s3_env
        tier = S3Tier.from_url(f"s3://{bucket}/cache")
        yield tier
        tier.close()

    def plant(self, tier: S3Tier, key: str, kind: str, blob: bytes) -> None:
        self.server.client().put_object(Bucket=tier.bucket, Key=tier.object_name(key, kind),
                                        Body=blob)


class TestRedisPointingToS3(S3Damage, TierContract):
    """Every entry over the inline limit (0 here: all of them) is an S3 object that a
    Redis pointer names; damage goes to the object, planting to the Redis key."""

    @pytest.fixture
    def tier(self, redis_server: RedisServer, s3_env: MotoS3Server, bucket: str,
             prefix: str) -> Iterator[RedisTier]:
        self.server, self.url = s3_env, redis_server.url
        tier = RedisTier.from_url(redis_server.url, prefix=prefix, inline_limit=0,
                                  object_store=S3Tier.from_url(f"s3://{bucket}/big"))
        yield tier
        tier.close()

    def s3_tier(self, tier: object) -> S3Tier:
        assert isinstance(tier, RedisTier) and isinstance(tier.object_store, S3Tier)
        return tier.object_store

    def plant(self, tier: RedisTier, key: str, kind: str, blob: bytes) -> None:
        raw_redis(self.url).set(tier.keys.entry(key, kind), blob)
