"""Real servers for the shared tiers' tests, on free ports (never the machine's own Redis).

Session-scoped servers are shared by every test, each test working under its own
Redis key prefix or S3 bucket; a test that kills or freezes a server starts its own
(``fresh_redis``, ``fresh_s3``). The servers come from ``voxcache.testing.servers``,
so a multi-node test elsewhere can start the same ones in a few lines.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voxcache.testing.servers import (
    MotoS3Server,
    RedisClusterServers,
    RedisServer,
    redis_available,
)

needs_redis = pytest.mark.skipif(not redis_available(),
                                 reason="needs redis-server (Debian package redis-server)")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session."""
    if not redis_available():
        pytest.skip("needs redis-server (Debian package redis-server)")
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    """A 3-master Redis Cluster for the session."""
    if not redis_available():
        pytest.skip("needs redis-server (Debian package redis-server)")
    with RedisClusterServers(tmp_path_factory.mktemp("cluster"), masters=3) as cluster:
        yield cluster


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, to kill, freeze or fill."""
    if not redis_available():
        pytest.skip("needs redis-server (Debian package redis-server)")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3Server]:
    """moto's S3 server for the session."""
    with MotoS3Server() as server:
        yield server


@pytest.fixture
def fresh_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoS3Server]:
    """A moto S3 server of this test's own (to kill or freeze), with the AWS variables
    pointing at it."""
    server = MotoS3Server()
    server.start()
    _point_aws_at(server, monkeypatch)
    yield server
    server.kill()


@pytest.fixture
def s3_env(s3_server: MotoS3Server, monkeypatch: pytest.MonkeyPatch) -> MotoS3Server:
    """The session's S3 server, with the standard AWS variables pointing at it."""
    _point_aws_at(s3_server, monkeypatch)
    return s3_server


@pytest.fixture
def bucket(s3_env: MotoS3Server) -> str:
    """A new, empty bucket on the session's S3 server."""
    name = f"vx-{uuid.uuid4().hex[:16]}"
    s3_env.create_bucket(name)
    return name


@pytest.fixture
def prefix() -> str:
    """A Redis key prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}:"


def _point_aws_at(server: MotoS3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)


def raw_redis(url: str) -> Any:
    """A plain redis-py client of ``url`` (a cluster one for ``redis+cluster://``), for the
    tests' own reads and damage."""
    from redis import Redis
    from redis.cluster import RedisCluster

    if url.startswith("redis+cluster://"):
        return RedisCluster.from_url(url.replace("redis+cluster://", "redis://", 1))
    return Redis.from_url(url)


def flip_byte(blob: bytes, at: int | None = None) -> bytes:
    """``blob`` with one bit flipped at ``at`` (the middle by default)."""
    damaged = bytearray(blob)
    damaged[len(blob) // 2 if at is None else at] ^= 0x40
    return bytes(damaged)
