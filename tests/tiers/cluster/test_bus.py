"""The cross-node bus (Redis Streams), through the library: several caches in one process,
each over its own folder, sharing one Redis — as nodes do.

Deletes, pins and revision switches reach every node's memory *and* disk tiers, once
(no echo). A node that lost its connection goes on where it stopped when it can prove it
missed nothing (its last entry is still in the stream); when it cannot (Redis came back
empty) it drops its memory tier and counts the gap. A node that was stopped during a
purge applies it to its disk when it starts, and news published while Redis is down
waits in an outbox until Redis answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voxcache import cache as cache_module
from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.request import SynthesisRequest
from voxcache.testing.servers import RedisServer

from .conftest import Make, needs_redis, raw_redis, until


def _render(node: CachedEngine, text: str) -> str:
    return node.synthesize(SynthesisRequest(text=text)).key


def _in_memory(node: CachedEngine, key: str) -> bool:
    return node.cache.in_process.peek(key) is not None


def _on_disk(node: CachedEngine, key: str) -> bool:
    return node.cache.folder.path_of(key).exists()


def test_a_delete_reaches_the_other_nodes_memory_and_disk_once(make_node: Make,
                                                                redis_url: str) -> None:
    a, b, c = (make_node(name, redis_url) for name in "abc")
    key = _render(a, "Tickets, please")
    for node in (b, c):
        node.synthesize(SynthesisRequest(text="Tickets, please"))
        assert _in_memory(node, key) and _on_disk(node, key)
    redis = raw_redis(redis_url)
    events = redis_url.split("prefix=")[1] + "{bus}:events"
    published = redis.xlen(events)
    assert a.cache.delete(key)
    for node in (b, c):
        until(lambda node=node: not _in_memory(node, key) and not _on_disk(node, key),
              what="the delete on the other nodes")
    assert redis.xlen(events) == published + 1  # applied by b and c, published by a alone
    assert b.cache.session_counts().get("bus_news_applied", 0) >= 1


def test_a_revision_switch_reaches_listeners_on_every_node(make_node: Make,
                                                           redis_url: str) -> None:
    a, b = make_node("a", redis_url), make_node("b", redis_url)
    heard: list[str] = []
    b.cache.on_event("revision", heard.append)
    until(lambda: b.cache.nodes.bus.in_touch, what="b following the bus")
    a.cache.announce("revision", "gpt-sovits@abc")
    until(lambda: heard == ["gpt-sovits@abc"], what="the revision news on b")


def test_a_pin_reaches_the_other_nodes_disk(make_node: Make, redis_url: str) -> None:
    a, b = make_node("a", redis_url), make_node("b", redis_url)
    key = _render(a, "Keep this one")
    b.synthesize(SynthesisRequest(text="Keep this one"))
    assert not b.cache.folder.is_pinned(key)
    assert a.cache.pin(key, True)
    until(lambda: b.cache.folder.is_pinned(key), what="the pin on b")
    assert a.cache.pin(key, False)
    until(lambda: not b.cache.folder.is_pinned(key), what="the unpin on b")


def test_a_dropped_connection_goes_on_where_it_stopped_and_keeps_memory(
        make_node: Make, redis_url: str) -> None:
    a, b = make_node("a", redis_url), make_node("b", redis_url)
    kept = _render(a, "Still here")
    gone = _render(a, "Going away")
    b.synthesize(SynthesisRequest(text="Still here"))
    b.synthesize(SynthesisRequest(text="Going away"))
    a.cache.delete(_render(a, "Warm the stream"))  # b has applied something: a position
    until(lambda: b.cache.session_counts().get("bus_news_applied", 0) >= 1)
    raw_redis(redis_url).client_kill_filter(_type="normal", skipme=True)  # every connection
    a.cache.delete(gone)  # published while b reconnects
    until(lambda: not _in_memory(b, gone) and not _on_disk(b, gone),
          what="the delete made while b was reconnecting")
    assert _in_memory(b, kept)  # proven complete: nothing dropped
    assert b.cache.session_counts().get("bus_gaps", 0) == 0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    needs_redis()
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


def test_a_redis_that_comes_back_empty_makes_nodes_drop_their_memory(
        make_node: Make, own_redis: RedisServer) -> None:
    a, b = make_node("a", own_redis.url), make_node("b", own_redis.url)
    key = _render(a, "Remember me")
    a.cache.delete(_render(a, "Something to follow"))
    until(lambda: b.cache.session_counts().get("bus_news_applied", 0) >= 1)
    b.synthesize(SynthesisRequest(text="Remember me"))
    assert _in_memory(b, key)
    own_redis.kill()
    own_redis.start()  # empty: the stream, and b's position in it, are gone
    until(lambda: b.cache.session_counts().get("bus_gaps", 0) >= 1, 30,
          "b to notice it cannot prove it missed nothing")
    assert not _in_memory(b, key)  # dropped: it cannot be proven fresh
    assert _on_disk(b, key)  # the disk tier is kept (docs/operating/cluster.md says why)


def test_news_published_while_redis_is_down_is_sent_when_it_is_back(
        make_node: Make, own_redis: RedisServer) -> None:
    a, b = make_node("a", own_redis.url), make_node("b", own_redis.url)
    key = _render(a, "Outbox")
    b.synthesize(SynthesisRequest(text="Outbox"))
    assert _on_disk(b, key)
    own_redis.kill()
    a.cache.delete(key)  # Redis is away: the news waits in a's outbox
    assert a.cache.session_counts().get("bus_news_held", 0) >= 1
    assert _on_disk(b, key)
    own_redis.start()
    until(lambda: not _on_disk(b, key), 30, "the held news applied on b")


@pytest.mark.parametrize("slow_start", [False, True])
def test_a_node_stopped_during_a_purge_applies_it_when_it_starts(
        make_node: Make, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        slow_start: bool) -> None:
    """``slow_start``: the cache goes on building for a while after its bus follower started,
    so the missed purge is replayed while the cache is not yet whole (it was dropped then:
    'Cache' object has no attribute 'nodes')."""
    if slow_start:
        class SlowNodes(cache_module.Nodes):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                time.sleep(1.0)  # the follower replays meanwhile

        monkeypatch.setattr(cache_module, "Nodes", SlowNodes)
    a, b = make_node("a", redis_url), make_node("b", redis_url)
    key = _render(a, "Purged while you were out")
    b.synthesize(SynthesisRequest(text="Purged while you were out"))
    a.cache.delete(_render(a, "A first piece of news"))
    until(lambda: b.cache.session_counts().get("bus_news_applied", 0) >= 1)
    b.cache.close()  # the node stops; its position stays in its folder
    a.cache.delete(key)
    again = Cache(tmp_path / "b", CacheConfig(tiers=("memory", "disk", redis_url)))
    try:
        until(lambda: not again.folder.path_of(key).exists(), 10,
              "the missed purge applied at start")
        assert again.session_counts().get("bus_gaps", 0) == 0  # its position was found
    finally:
        again.close()
