"""Tier spellings: what each becomes, and the message for one voxcache cannot use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from voxcache.errors import InvalidParameter, MissingDependency
from voxcache.testing.tier_contract import make_audio_entry
from voxcache.tiers.disk import DiskTier
from voxcache.tiers.factory import split_tier_list, tier_from_url, tiers_from_urls
from voxcache.tiers.memory import MemoryTier
from voxcache.tiers.redis import RedisTier
from voxcache.tiers.s3 import S3Tier


def test_each_spelling_makes_its_tier(tmp_path: Path, s3_env):
    assert isinstance(tier_from_url("memory"), MemoryTier)
    disk = tier_from_url("disk", root=tmp_path / "cache")
    assert isinstance(disk, DiskTier)
    disk.close()
    redis = tier_from_url("redis://127.0.0.1:1/0?prefix=app1:&inline_limit=1000")
    assert isinstance(redis, RedisTier) and redis.name == "redis"
    assert redis.keys.prefix == "app1:" and redis.inline_limit == 1000
    assert isinstance(tier_from_url("rediss+cluster://127.0.0.1:1"), RedisTier)
    s3 = tier_from_url("s3://my-bucket/voice/cache?timeout=3&attempts=1")
    assert isinstance(s3, S3Tier) and (s3.bucket, s3.prefix, s3.timeout) == (
        "my-bucket", "voice/cache/", 3.0)
    assert tier_from_url("s3://my-bucket").prefix == ""


def test_keyword_options_win_over_the_query():
    tier = tier_from_url("redis://127.0.0.1:1/2?inline_limit=5", inline_limit=7)
    assert tier.inline_limit == 7


def test_a_list_links_redis_to_s3(tmp_path: Path, s3_env):
    tiers = tiers_from_urls(
        ["memory", "disk", "redis://127.0.0.1:1/0", "s3://bucket-a/p"],
        options={"disk": {"root": tmp_path / "c"}, "redis": {"inline_limit": 10}})
    assert [tier.name for tier in tiers] == ["memory", "disk", "redis", "s3"]
    assert tiers[2].object_store is tiers[3] and tiers[2].inline_limit == 10
    tiers[1].close()
    alone = tiers_from_urls(["redis://127.0.0.1:1/0"])[0]
    assert alone.object_store is None


def test_a_large_entry_reaches_s3_through_a_configured_list(redis_server, bucket):
    redis, s3 = tiers_from_urls([f"{redis_server.url}?prefix=list:", f"s3://{bucket}/l"])
    big = make_audio_entry(1, frames=300_000)
    assert redis.put(big)
    assert s3.get(big.header.key).blob == big.blob
    assert redis.get(big.header.key).blob == big.blob
    redis.delete(big.header.key)


def test_the_env_spelling_splits_on_commas():
    assert split_tier_list(" memory, disk ,redis://h:6379/0,s3://b/p ") == [
        "memory", "disk", "redis://h:6379/0", "s3://b/p"]


@pytest.mark.parametrize(("spelling", "says"), [
    ("memcached://h:11211", "memory, disk, redis://"),
    ("", "is not one voxcache knows"),
    ("redis://", "names no host"),
    ("redis://h:port/0", "malformed"),
    ("redis://h:6379/zero", "database number"),
    ("redis+cluster://h:7000/3", "only database 0"),
    ("redis://h:6379/0?inline_limit=lots", "must be a int"),
    ("redis://h:6379/0?timeout=-1", "positive"),
    ("redis://h:6379/0?timeout=nan", "positive"),
    ("redis://h:6379/0?timeout=0", "positive"),
    ("redis://h:6379/0?db=3", "unknown option 'db'"),
    ("redis://h:6379/0?prefix={tag}", "no braces"),
    ("redis://h:6379/0?prefix=a*b", "not allowed"),
    ("s3://", "s3://bucket/prefix"),
    ("s3://Bad_Bucket/x", "bucket name"),
    ("s3://bucket/../etc", "prefix"),
    ("s3://bucket/x?acl=public-read", "unknown"),
    ("s3://bucket/x?attempts=0", "positive"),
    ("s3://bucket/x?addressing_style=sideways", "addressing_style"),
])
def test_a_spelling_it_cannot_use_says_what_to_write(spelling: str, says: str):
    with pytest.raises(InvalidParameter) as refused:
        tier_from_url(spelling)
    assert says in str(refused.value)


def test_a_password_never_appears_in_a_message():
    with pytest.raises(InvalidParameter) as refused:
        tier_from_url("redis://:hunter2@h:6379/0?color=blue")
    assert "hunter2" not in str(refused.value) and "***" in str(refused.value)
    tier = tier_from_url("redis://user:hunter2@127.0.0.1:1/0", connect_timeout=0.2)
    assert "hunter2" not in tier.health().detail
    assert "hunter2" not in str(tier.stats())


def test_a_list_names_each_tier_once(tmp_path: Path):
    with pytest.raises(InvalidParameter, match="redis more than once"):
        tiers_from_urls(["redis://a:1/0", "redis+cluster://b:2"])
    with pytest.raises(InvalidParameter, match="empty"):
        tiers_from_urls([])
    with pytest.raises(InvalidParameter, match="root="):
        tiers_from_urls(["disk"])


@pytest.mark.parametrize(("spelling", "library", "module"), [
    ("redis://h:6379/0", "redis", "voxcache.tiers.redis"),
    ("s3://bucket/p", "boto3", "voxcache.tiers.s3"),
])
def test_a_missing_extra_names_the_pip_command(monkeypatch, spelling, library, module):
    monkeypatch.setitem(sys.modules, library, None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingDependency, match=r"pip install 'voxcache\[shared\]'"):
        tier_from_url(spelling)
