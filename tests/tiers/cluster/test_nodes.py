"""Three ``voxcache serve`` nodes, each with its own cache folder, sharing Redis and S3.

Run once against a single redis-server and once against a 3-master Redis Cluster (the
same moto S3 server behind both). What a deployment of several nodes is promised:

- a take rendered through one node is a HIT on the others (``X-Cache-Tier: redis``, or
  ``s3`` when Redis lost it), with the same samples;
- many callers of one new key on every node at once: exactly one render in total;
- a purge on any node, or from the CLI, stops every node serving the take within the
  bound (docs/operating/cluster.md), and is published once (no echo);
- a damaged object in Redis or S3 is detected, counted and rendered again, never served;
- pins reach every node; the tiers' health is in ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from voxcache.testing import forked
from voxcache.testing.servers import MotoS3Server, clean_env

from .conftest import Node, new_bucket, new_prefix, nodes, raw_redis, samples, until

pytestmark = pytest.mark.slow


@dataclass
class Trio:
    nodes: list[Node]
    redis_url: str
    prefix: str
    bucket: str
    s3: MotoS3Server
    config: Any
    env: dict[str, str]
    """What a CLI run beside a node needs (the AWS variables)."""

    def redis(self) -> Any:
        return raw_redis(self.redis_url)

    def entry_name(self, key: str) -> str:
        return f"{self.prefix}{{{key}}}:entry:audio"

    def object_name(self, key: str) -> str:
        return f"p/objects/{key[:2]}/{key[2:4]}/{key}.wav"

    def in_s3(self, key: str) -> bool:
        try:
            self.s3.client().head_object(Bucket=self.bucket, Key=self.object_name(key))
        except Exception:
            return False
        return True

    def shared(self, key: str) -> bool:
        """Whether both shared tiers hold the take (its writes are behind a queue)."""
        return bool(self.redis().exists(self.entry_name(key))) and self.in_s3(key)

    def renders(self) -> int:
        return sum(node.syntheses() for node in self.nodes)


@pytest.fixture(scope="module", params=["redis", "cluster"])
def trio(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         s3_server: MotoS3Server) -> Iterator[Trio]:
    server = request.getfixturevalue("redis_server" if request.param == "redis"
                                     else "redis_cluster")
    prefix, bucket = new_prefix(), new_bucket(s3_server)
    redis_url = f"{server.url}?prefix={prefix}"
    folder = tmp_path_factory.mktemp(f"trio-{request.param}")
    tiers = ["memory", "disk", redis_url, f"s3://{bucket}/p"]
    with nodes(folder, tiers, env=s3_server.env) as group:
        config = next(folder.glob("voxcache-*.toml"))
        env = clean_env()
        yield Trio(group, redis_url, prefix, bucket, s3_server, config, env | s3_server.env)


def test_a_take_rendered_on_one_node_is_a_hit_on_the_others(trio: Trio) -> None:
    a, b, c = trio.nodes
    first = a.speak("Platform two for the airport train.")
    assert first.headers["x-cache"] == "MISS"
    key = first.headers["x-cache-key"]
    until(lambda: trio.shared(key), what="the take in Redis and S3")
    for node in (b, c):
        got = node.speak("Platform two for the airport train.")
        assert got.status_code == 200
        assert (got.headers["x-cache"], got.headers["x-cache-tier"]) == ("HIT", "redis")
        assert samples(got) == samples(first)
        again = node.speak("Platform two for the airport train.")  # promoted: now local
        assert again.headers["x-cache-tier"] == "memory"
    assert trio.renders() == 1


def test_s3_answers_when_redis_lost_the_take_and_fills_redis_again(trio: Trio) -> None:
    a, b, c = trio.nodes
    first = b.speak("Mind the gap between the train and the platform.")
    key = first.headers["x-cache-key"]
    until(lambda: trio.shared(key), what="the take in Redis and S3")
    trio.redis().delete(trio.entry_name(key))  # evicted, or Redis restarted
    got = c.speak("Mind the gap between the train and the platform.")
    assert (got.headers["x-cache"], got.headers["x-cache-tier"]) == ("HIT", "s3")
    assert samples(got) == samples(first)
    until(lambda: trio.redis().exists(trio.entry_name(key)), what="the take promoted to Redis")
    got = a.speak("Mind the gap between the train and the platform.")
    assert got.headers["x-cache-tier"] == "redis" and samples(got) == samples(first)


async def _stampede(group: list[Node], body: dict[str, Any], each: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=each * len(group))
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(*(
            client.post(f"{node.url}/v1/audio/speech", json=body)
            for _ in range(each) for node in group))


def test_three_nodes_times_32_callers_of_one_new_key_render_it_once(trio: Trio) -> None:
    before = trio.renders()
    body = {"input": "Everyone at once, please.", "response_format": "wav",
            "params": {"delay": 0.5}}
    answers = asyncio.run(_stampede(trio.nodes, body, 32))
    assert [r.status_code for r in answers] == [200] * 96
    assert len({samples(r) for r in answers}) == 1
    assert trio.renders() - before == 1
    assert [r.headers["x-cache"] for r in answers].count("MISS") == 1


def test_a_purge_on_one_node_stops_every_node_serving_it_and_is_not_echoed(
        trio: Trio) -> None:
    a, b, c = trio.nodes
    key = a.speak("Last call for passengers to Lisbon.").headers["x-cache-key"]
    until(lambda: trio.shared(key), what="the take in Redis and S3")
    for node in (b, c):
        node.speak("Last call for passengers to Lisbon.")  # now in their memory and disk
        assert node.get(f"/v1/audio/{key}").headers["x-cache-tier"] == "memory"
    events = f"{trio.prefix}{{bus}}:events"
    published = trio.redis().xlen(events)

    assert httpx.delete(f"{a.url}/v1/entries/{key}", timeout=60).status_code == 204
    for node in trio.nodes:
        until(lambda node=node: node.get(f"/v1/audio/{key}").status_code == 404,
              what=f"node {node.name} to stop serving the purged take")
    assert not trio.shared(key)
    time.sleep(0.5)  # had any node re-published what it applied, it would be there now
    assert trio.redis().xlen(events) == published + 1
    again = c.speak("Last call for passengers to Lisbon.")
    assert again.headers["x-cache"] == "MISS"


def test_a_purge_from_the_cli_stops_every_node_serving_it(trio: Trio) -> None:
    a, b, c = trio.nodes
    key = b.speak("The shop closes in five minutes.").headers["x-cache-key"]
    until(lambda: trio.shared(key), what="the take in Redis and S3")
    for node in (a, c):
        assert node.speak("The shop closes in five minutes.").headers["x-cache"] == "HIT"
    done = forked.run(
        [sys.executable, "-m", "voxcache", "--cache-dir", str(b.cache_dir), "--engine", "tone",
         "--config", str(trio.config), "purge", "--key", key],
        capture_output=True, text=True, timeout=60, env=trio.env)
    assert done.returncode == 0, done.stdout + done.stderr
    for node in trio.nodes:
        until(lambda node=node: node.get(f"/v1/audio/{key}").status_code == 404,
              what=f"node {node.name} to stop serving the purged take")
    assert not trio.shared(key)


def _flip(blob: bytes) -> bytes:
    damaged = bytearray(blob)
    damaged[len(damaged) // 2] ^= 0x40
    return bytes(damaged)


def test_damaged_objects_in_redis_and_s3_are_never_served(trio: Trio) -> None:
    a, b, _ = trio.nodes
    first = a.speak("Doors closing, stand clear of the doors.")
    key = first.headers["x-cache-key"]
    until(lambda: trio.shared(key), what="the take in Redis and S3")
    redis = trio.redis()
    redis.set(trio.entry_name(key), _flip(redis.get(trio.entry_name(key))))
    s3 = trio.s3.client()
    blob = s3.get_object(Bucket=trio.bucket, Key=trio.object_name(key))["Body"].read()
    s3.put_object(Bucket=trio.bucket, Key=trio.object_name(key), Body=_flip(blob))
    before = trio.renders()

    got = b.speak("Doors closing, stand clear of the doors.")
    assert got.status_code == 200
    assert got.headers["x-cache"] == "MISS"  # rendered again, not served from either tier
    assert samples(got) == samples(first)
    assert trio.renders() == before + 1
    stats = b.get("/v1/stats").json()
    assert stats["tiers"]["redis"]["counts"]["corruptions"] >= 1
    assert stats["tiers"]["s3"]["counts"]["corruptions"] >= 1
    until(lambda: b.counters().get("redis_corruptions", 0) >= 1
          and b.counters().get("s3_corruptions", 0) >= 1, what="corruptions persisted")
    until(lambda: trio.shared(key), what="the new take shared again")
    assert samples(a.speak("Doors closing, stand clear of the doors.")) == samples(first)


def test_a_pin_on_one_node_reaches_the_others(trio: Trio) -> None:
    a, b, c = trio.nodes
    key = a.speak("Welcome aboard.").headers["x-cache-key"]
    until(lambda: trio.shared(key), what="the take in Redis and S3")
    for node in (b, c):
        node.speak("Welcome aboard.")

    def pinned(node: Node) -> bool:
        listed = node.get("/v1/entries").json()["entries"]
        return any(row["key"] == key and row["pinned"] for row in listed)

    assert not pinned(b)
    assert httpx.put(f"{a.url}/v1/entries/{key}/pin", timeout=60).status_code == 204
    for node in (b, c):
        until(lambda node=node: pinned(node), what=f"the pin on node {node.name}")
    assert httpx.delete(f"{a.url}/v1/entries/{key}/pin", timeout=60).status_code == 204
    for node in (b, c):
        until(lambda node=node: not pinned(node), what=f"the unpin on node {node.name}")


def test_readyz_and_metrics_name_the_shared_tiers(trio: Trio) -> None:
    node = trio.nodes[0]
    ready = node.get("/readyz").json()
    assert {name: health["state"] for name, health in ready["tiers"].items()} == {
        "memory": "ok", "disk": "ok", "redis": "ok", "s3": "ok"}
    assert ready["nodes"]["bus"]["state"] == "ok"
    metrics = node.get("/metrics").text
    assert 'voxcache_tier_up{tier="redis"} 1.0' in metrics
    assert 'voxcache_tier_up{tier="s3"} 1.0' in metrics
