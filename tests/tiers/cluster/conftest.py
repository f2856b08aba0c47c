"""Several ``voxcache serve`` nodes sharing real Redis (single or Cluster) and S3 (moto).

Every server is a real process on a free port (``voxcache.testing.servers``); every
node is a real ``voxcache serve`` process with its own cache folder, told its tiers
through the config file (``tiers = [...]``) and the S3 endpoint through the standard
AWS variables. Nodes of one group share a Redis key prefix and a bucket no other
group uses, so groups on the session's servers never see each other's takes.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.testing import forked, waiting
from voxcache.testing.servers import (
    MotoS3Server,
    RedisClusterServers,
    RedisServer,
    clean_env,
    free_port,
    redis_available,
)

START_LIMIT = 90.0
BOUND = 3.0
"""What the tests allow for news to reach every node (docs/operating/cluster.md states 0.25 s while
Redis answers; a loaded 2-core CI machine gets slack)."""


def needs_redis() -> None:
    if not redis_available():
        pytest.skip("needs redis-server (Debian package redis-server)")


# The cluster tests' own session servers, not tests/tiers/conftest.py's: the admission test
# scans all of Redis for private text, and sharing the tier tests' server put their takes in
# that scan (their audio held the bytes "0958", a needle; tried and failed once in two runs)
@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (groups use their own key prefixes)."""
    needs_redis()
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    """A 3-master Redis Cluster made with ``redis-cli --cluster create``."""
    needs_redis()
    with RedisClusterServers(tmp_path_factory.mktemp("cluster"), masters=3) as cluster:
        yield cluster


def new_bucket(s3: MotoS3Server) -> str:
    name = f"vx-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(name)
    return name


def new_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}:"


@dataclass
class Node:
    """One ``voxcache serve`` process."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    cache_dir: Path
    log_path: Path

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=60, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", timeout=60, **kwargs)

    def speak(self, text: str, **fields: Any) -> httpx.Response:
        """``POST /v1/audio/speech`` (WAV)."""
        return self.post("/v1/audio/speech", json={"input": text, "response_format": "wav",
                                                   **fields})

    def counters(self) -> dict[str, int]:
        """The node's persisted counters (``/v1/stats``)."""
        return self.get("/v1/stats").json()["counters"]

    def syntheses(self) -> int:
        """Renders this node's engine made (counted at the engine, persisted)."""
        return int(self.counters().get("syntheses", 0))

    def kill(self) -> None:
        """SIGKILL: the node vanishes mid-whatever."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _config(folder: Path, tiers: list[str], extra: str) -> Path:
    path = folder / f"voxcache-{uuid.uuid4().hex[:6]}.toml"
    listed = ", ".join(f'"{tier}"' for tier in tiers)
    path.write_text(f"tiers = [{listed}]\n{extra}", encoding="utf-8")
    return path


@contextlib.contextmanager
def nodes(folder: Path, tiers: list[str], *, count: int = 3, engine: str = "tone",
          args: tuple[str, ...] = (), env: dict[str, str] | None = None,
          extra_config: str = "") -> Iterator[list[Node]]:
    """``count`` nodes started together (each with its own cache folder), ready on exit."""
    config = _config(folder, tiers, extra_config)
    clean = clean_env()
    started: list[Node] = []
    try:
        for index in range(count):
            name = "ABCDEFGH"[index]
            port = free_port()
            cache_dir = folder / f"node-{name}-{port}"
            log_path = folder / f"node-{name}-{port}.log"
            with log_path.open("wb") as log:
                process = forked.popen(
                    [sys.executable, "-m", "voxcache", "--cache-dir", str(cache_dir),
                     "--engine", engine, "--config", str(config), "serve", "--port", str(port),
                     *args], env={**clean, **(env or {})}, stdout=log,
                    stderr=subprocess.STDOUT)
            started.append(Node(name, f"http://127.0.0.1:{port}", process, cache_dir,
                                log_path))
        for node in started:
            _wait_ready(node)
        yield started
    finally:
        for node in started:
            if node.process.poll() is None:
                node.process.terminate()
        for node in started:
            try:
                node.process.wait(30)
            except subprocess.TimeoutExpired:
                node.kill()


def _wait_ready(node: Node) -> None:
    deadline = time.monotonic() + START_LIMIT
    while True:
        if node.process.poll() is not None:
            raise RuntimeError(f"node {node.name} exited: {node.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{node.url}/readyz", timeout=5).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node.name} did not become ready: {node.log()}")
        time.sleep(0.1)


def until(check: Callable[[], Any], bound: float = BOUND, what: str = "the condition") -> Any:
    """``voxcache.testing.waiting.until``, by default within the news bound."""
    return waiting.until(check, bound, what)


def raw_redis(url: str) -> Any:
    """A plain redis-py client (a cluster one for ``redis+cluster://``), for the tests' own
    reads and damage."""
    from redis import Redis
    from redis.cluster import RedisCluster

    bare = url.split("?", 1)[0]
    if bare.startswith("redis+cluster://"):
        return RedisCluster.from_url(bare.replace("redis+cluster://", "redis://", 1))
    return Redis.from_url(bare)


def samples(response: httpx.Response) -> bytes:
    """The PCM of a WAV answer (its ``data`` chunk), whatever the envelope around it."""
    import io
    import wave

    with wave.open(io.BytesIO(response.content)) as wav:
        return wav.readframes(wav.getnframes())


@pytest.fixture
def aws_env(s3_server: MotoS3Server) -> dict[str, str]:
    """The standard AWS variables pointing at the session's S3 server."""
    return dict(s3_server.env)


Make = Callable[..., CachedEngine]
"""``make_node(name, redis_url)``: a node in this process (tests of the bus and leases)."""


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Make]:
    """Nodes (a cache over a folder of their own + the tone engine) on Redis, in process."""
    made: list[CachedEngine] = []

    def make(name: str, redis_url: str, lock_wait: float = 60.0) -> CachedEngine:
        cache = Cache(tmp_path / name, CacheConfig(tiers=("memory", "disk", redis_url)))
        made.append(CachedEngine(ToneEngine(), cache, lock_wait=lock_wait))
        return made[-1]

    yield make
    for node in made:
        node.cache.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's redis-server under a key prefix of this test's own."""
    return f"{redis_server.url}?prefix={new_prefix()}"
