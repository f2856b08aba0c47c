"""One key, one take across nodes, even when the render lease cannot hold.

Three ``voxcache serve`` nodes render with Piper at its default noise (every render of
a sentence is a different take), on real Redis and S3, with the CPUs loaded and Redis
made slow for the lease commands (a proxy holds them past the client's 0.5 s timeout),
so every node's lease fails open and each renders its own take. Whatever the nodes
rendered, once the round's publication is done every node serves the one take the
shared tiers hold — the first published — and nothing else (the reported fault: 6 of 7
keys were served as three takes, one per node, and stayed split after the delay ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from voxcache.testing.proxies import SlowRedisProxy
from voxcache.testing.servers import MotoS3Server, RedisServer

from .conftest import Node, new_bucket, new_prefix, nodes, samples, until
from .test_nodes import _stampede

pytestmark = [pytest.mark.piper, pytest.mark.slow]

ROUNDS = 10
"""Every round reproduces the fault's conditions (three renders, three takes heard: the
leases failed open), so each round is a full trial of convergence."""
EACH = 2
"""Concurrent identical requests per node per round."""
PHRASES = [f"{place}, platform {word}." for word, place in zip(
    ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
     "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
     "nineteen", "twenty"],
    ["Leeds", "York", "Bath", "Derby", "Exeter", "Dover", "Ely", "Hull", "Wells", "Truro",
     "Ripon", "Lincoln", "Durham", "Carlisle", "Preston", "Chester", "Oxford", "Salford",
     "Bangor", "Perth"], strict=True)]
"""Short phrases: a round is three renders on loaded cores."""


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU (the loaded host the fault was seen on)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(10)


def _published(node: Node) -> bool:
    """Nothing of this node's is waiting to be published (queued, retried or running)."""
    tiers = node.get("/v1/stats").json()["tiers"]
    return all(tier.get("write_queue", {}).get("busy", 0) == 0 for name, tier in tiers.items()
               if name in ("redis", "s3"))


def _object_pcm(s3: MotoS3Server, bucket: str, key: str) -> bytes:
    name = f"p/objects/{key[:2]}/{key[2:4]}/{key}.wav"
    body = s3.client().get_object(Bucket=bucket, Key=name)["Body"].read()
    with wave.open(io.BytesIO(body)) as wav:
        return wav.readframes(wav.getnframes())


def test_duplicate_renders_converge_on_the_first_published_take(
        tmp_path: Path, redis_server: RedisServer, s3_server: MotoS3Server) -> None:
    bucket = new_bucket(s3_server)
    with SlowRedisProxy(redis_server.port, delay=0.8, match=b":lease") as proxy:
        tiers = ["memory", "disk", f"{proxy.url}?prefix={new_prefix()}", f"s3://{bucket}/p"]
        with nodes(tmp_path, tiers, engine="piper", env=s3_server.env) as group, cpu_hogs(1):
            rows = []
            for text in PHRASES[:ROUNDS]:
                before = sum(node.syntheses() for node in group)
                body = {"input": text, "response_format": "wav"}
                answers = asyncio.run(_stampede(group, body, EACH))
                assert [a.status_code for a in answers] == [200] * EACH * len(group)
                key = answers[0].headers["x-cache-key"]
                for node in group:
                    until(lambda n=node: _published(n), 60, f"node {node.name}'s publication")
                heard = [(node.name, node.speak(text)) for node in group for _ in range(2)]
                after = [samples(answer) for _, answer in heard]
                published = _object_pcm(s3_server, bucket, key)
                renders = sum(node.syntheses() for node in group) - before
                rows.append((renders, len({samples(a) for a in answers}), len(set(after))))
                served = [(name, a.headers["x-cache-tier"], samples(a) == published)
                          for name, a in heard]
                assert set(after) == {published}, (
                    f"{text!r}: {len(set(after))} takes served after publication "
                    f"({renders} renders); node, tier, the published take: {served}")
            print("\nrenders, takes heard in the round, takes served after publication:")
            for row in rows:
                print("  ", row)
            assert proxy.delayed > 0, "no lease command went through the slow path"
            assert sum(row[0] for row in rows) > ROUNDS, (
                "every key rendered once: the leases held, so this proved nothing")


def test_a_miss_reads_each_tier_twice_at_most(tmp_path: Path, redis_server: RedisServer,
                                             s3_server: MotoS3Server, aws_env: dict[str, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Once before the flight, once inside the lock: a miss through the service's path (the
    asyncio ``take``) and the library's (``synthesize``) reads Redis and S3 twice each. It
    used to read every tier three times (on the loop, again in the miss thread, again after
    the lock): three remote GETs per tier before the engine was called."""
    from voxcache.cache import Cache, CacheConfig
    from voxcache.cached import CachedEngine
    from voxcache.engines.tone import ToneEngine
    from voxcache.request import SynthesisRequest

    for name, value in aws_env.items():
        monkeypatch.setenv(name, value)
    tiers = ("memory", "disk", f"{redis_server.url}?prefix={new_prefix()}",
             f"s3://{new_bucket(s3_server)}/p")
    cache = Cache(tmp_path / "node", CacheConfig(tiers=tiers))
    cached = CachedEngine(ToneEngine(), cache)

    def reads() -> dict[str, int]:
        counts = {name: cache.tiers.by_name(name).stats()["counts"]  # type: ignore[union-attr]
                  for name in ("redis", "s3")}
        return {name: c.get("hits", 0) + c.get("misses", 0) for name, c in counts.items()}

    try:
        for ask in (lambda r: asyncio.run(cached.take(r, timeout=30)), cached.synthesize):
            before = reads()
            ask(SynthesisRequest(f"A new sentence, asked through {ask}."))
            after = reads()
            assert {name: after[name] - before[name] for name in after} == {
                "redis": 2, "s3": 2}
    finally:
        cache.close()


def test_a_node_that_could_not_publish_adopts_the_published_take_once_it_can(
        tmp_path: Path, s3_server: MotoS3Server) -> None:
    """Node B's link to S3 is cut while it renders a key node A has published: B serves its
    own take (fail open), its write is retried, and once the link is back B holds and serves
    the take S3 holds — the stored file itself, envelope and all — from memory and disk."""
    from voxcache.testing.proxies import TcpProxy

    bucket = new_bucket(s3_server)
    tiers = ["memory", "disk", f"s3://{bucket}/p"]
    text = "Published on one node while the other was cut off."
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with TcpProxy(s3_server.port) as link, \
            nodes(tmp_path / "a", tiers, count=1, env=s3_server.env) as (a,), \
            nodes(tmp_path / "b", tiers, count=1,
                  env={**s3_server.env, "AWS_ENDPOINT_URL": link.endpoint}) as (b,):
        link.blocked = True
        key = a.speak(text).headers["x-cache-key"]
        until(lambda: _published(a), 30, "A's publication")
        assert b.speak(text).headers["x-cache"] == "MISS"  # B cannot see S3: renders its own
        published = s3_server.client().get_object(
            Bucket=bucket, Key=f"p/objects/{key[:2]}/{key[2:4]}/{key}.wav")["Body"].read()
        assert b.get(f"/v1/audio/{key}").content != published  # its own take, for now
        link.blocked = False
        until(lambda: b.get(f"/v1/audio/{key}").content == published, 20,
              "B to adopt the published take")
        assert b.counters().get("takes_adopted", 0) >= 1
        for _ in range(2):  # from memory and from disk alike
            assert b.get(f"/v1/audio/{key}").content == published


def test_a_tensor_voice_uploaded_on_one_node_is_known_to_the_others(
        tmp_path: Path, redis_server: RedisServer, s3_server: MotoS3Server) -> None:
    """A tensor voice lives in the shared tiers like any artifact: uploaded on node A, it is
    used by id on node B (which never saw the upload), and B's take is A's take. Another
    tenant's key cannot use it (a 404 like any unknown id)."""
    import numpy as np
    from safetensors.numpy import save

    tiers = ["memory", "disk", f"{redis_server.url}?prefix={new_prefix()}",
             f"s3://{new_bucket(s3_server)}/p"]
    keys = ('[tenants.acme]\napi_keys = ["acme-key"]\n'
            '[tenants.other]\napi_keys = ["other-key"]\n')
    with nodes(tmp_path, tiers, count=2, engine="styletone", env=s3_server.env,
               extra_config=keys) as (a, b):
        acme = {"Authorization": "Bearer acme-key"}
        style = np.random.default_rng(11).normal(size=256).astype("float32")
        made = a.post("/v1/voices", files={"file": ("v.safetensors", save({"v": style}))},
                      headers=acme)
        assert made.status_code == 201, made.text
        voice = made.json()["id"]
        body = {"input": "A voice from another node.", "voice": voice, "seed": 4,
                "response_format": "wav"}
        on_a = a.post("/v1/audio/speech", json=body, headers=acme)
        on_b = b.post("/v1/audio/speech", json=body, headers=acme)
        assert on_a.status_code == on_b.status_code == 200, on_b.text
        assert samples(on_b) == samples(on_a)
        assert on_b.headers["x-cache-key"] == on_a.headers["x-cache-key"]
        stranger = b.post("/v1/audio/speech", json=body,
                          headers={"Authorization": "Bearer other-key"})
        assert stranger.status_code in (400, 404) and voice in stranger.text
