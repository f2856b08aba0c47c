"""Render leases in Redis, through the library: caches over separate folders sharing Redis.

One render per key across nodes (the waiters are woken by the bus, not by their poll);
a lease is renewed while its render outlives its time to live; a holder that vanished
(never renews, never releases) is taken over once its lease expires; a node whose bus
is gone still finds the take by polling; and with Redis down the lease fails open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from voxcache.cached import CachedEngine
from voxcache.outcome import Result
from voxcache.request import SynthesisRequest
from voxcache.testing.servers import RedisServer

from .conftest import Make, needs_redis, raw_redis


def _at_once(*calls: Callable[[], Result]) -> list[Result]:
    results: list[Result | BaseException] = [RuntimeError("did not finish")] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # handed back to the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def _renders(*nodes: CachedEngine) -> int:
    return sum(len(node.engine.calls) for node in nodes)  # type: ignore[attr-defined]


def test_nodes_render_a_key_once_and_waiters_are_woken_by_the_bus(make_node: Make,
                                                                   redis_url: str) -> None:
    nodes = [make_node(name, redis_url) for name in "abcd"]
    for node in nodes[1:]:
        assert node.cache.leases is not None
        node.cache.leases.poll = 60.0  # polling could not wake them within the test
    request = SynthesisRequest(text="Only once across the fleet", params={"delay": 1.0})
    results = _at_once(*(lambda node=node: node.synthesize(request) for node in nodes))
    assert _renders(*nodes) == 1
    assert len({r.entry.audio().pcm for r in results}) == 1
    assert sorted(r.cache for r in results) == ["joined", "joined", "joined", "miss"]
    woken = sum(node.cache.session_counts().get("lease_wakeups", 0) for node in nodes)
    assert woken >= 1  # those that waited were woken by news of the take, not a poll


def test_a_lease_is_renewed_while_a_long_render_runs(make_node: Make, redis_url: str) -> None:
    a, b = make_node("a", redis_url), make_node("b", redis_url)
    for node in (a, b):
        assert node.cache.leases is not None
        node.cache.leases.ttl = 1.5  # the render below takes 4 s: only renewal keeps it
    request = SynthesisRequest(text="A long sentence that takes a while", params={"delay": 4.0})
    started = threading.Event()
    first = threading.Thread(target=lambda: (started.set(), a.synthesize(request)))
    first.start()
    started.wait()
    time.sleep(0.5)  # a has the lease now
    b.synthesize(request)
    first.join(60)
    assert _renders(a, b) == 1


def test_a_vanished_holder_is_taken_over_once_its_lease_expires(make_node: Make,
                                                                 redis_url: str) -> None:
    b = make_node("b", redis_url)
    request = SynthesisRequest(text="Whoever held this is gone")
    key = b.resolve_and_key(request)[1]
    prefix = redis_url.split("prefix=")[1]
    # a holder that died: it took the lease and will never renew or release it
    raw_redis(redis_url).set(f"{prefix}{{{key}}}:lease", "host/1/dead", px=1500)
    result = b.synthesize(request)
    assert result.cache == "miss" and _renders(b) == 1
    assert b.cache.session_counts().get("leases_taken", 0) == 1


def test_without_its_bus_a_waiter_finds_the_take_by_polling(make_node: Make,
                                                             redis_url: str) -> None:
    a, b = make_node("a", redis_url), make_node("b", redis_url)
    assert b.cache.nodes.bus is not None
    b.cache.nodes.bus.close()  # b hears no news any more
    request = SynthesisRequest(text="Polling finds it", params={"delay": 1.0})
    results = _at_once(lambda: a.synthesize(request), lambda: b.synthesize(request))
    assert _renders(a, b) == 1
    assert sorted(r.cache for r in results) == ["joined", "miss"]


@pytest.fixture
def dead_redis(tmp_path: Path) -> str:
    needs_redis()
    server = RedisServer(tmp_path / "redis")
    server.start()
    server.kill()  # a port nobody answers on
    return server.url


def test_with_redis_down_the_lease_fails_open(make_node: Make, dead_redis: str) -> None:
    a = make_node("a", dead_redis)
    result = a.synthesize(SynthesisRequest(text="Redis is not there"))
    assert result.cache == "miss" and result.stored
    counts = a.cache.session_counts()
    assert counts.get("lease_failopen", 0) == 1
    assert a.synthesize(SynthesisRequest(text="Redis is not there")).cache == "hit"
