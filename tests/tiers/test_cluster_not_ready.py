"""A Redis Cluster that is not ready yet: a node started with ``cluster-enabled yes`` whose
slots were never assigned (the state between starting the servers and ``redis-cli --cluster
create``). Health must say that in words an operator can act on (it said ``IndexError: list
index out of range``), requests must go on without the tier, and once the slots are
assigned the tier must be used without a restart.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from voxcache.errors import TierUnavailable
from voxcache.testing import forked
from voxcache.testing.servers import RedisServer, clean_env, free_port
from voxcache.tiers.redis import RedisTier

from .conftest import needs_redis


def _assign_every_slot(node: RedisServer) -> None:
    assert node.cli("CLUSTER", "ADDSLOTSRANGE", "0", "16383").strip() == "OK"
    deadline = time.monotonic() + 20
    while "cluster_state:ok" not in node.cli("CLUSTER", "INFO"):
        assert time.monotonic() < deadline, node.cli("CLUSTER", "INFO")
        time.sleep(0.05)


@needs_redis
def test_health_says_the_cluster_has_no_slots_and_recovers_once_it_has(tmp_path: Path) -> None:
    with RedisServer(tmp_path, cluster=True) as node:
        tier = RedisTier.from_url(f"redis+cluster://127.0.0.1:{node.port}")
        health = tier.health()  # raised IndexError before
        assert health.state == "down"
        assert "not ready: no master holds any hash slot" in (health.detail or "")
        assert "redis-cli --cluster create" in (health.detail or "")
        assert "IndexError" not in (health.detail or "")
        with pytest.raises(TierUnavailable, match="not ready"):  # the stack's miss
            tier.get("a" * 64, "audio")

        _assign_every_slot(node)
        assert tier.health().state == "ok"
        tier.close()


@needs_redis
def test_readyz_of_a_node_in_front_of_an_unready_cluster(tmp_path: Path) -> None:
    """``voxcache serve`` over the unready cluster: ready (hits and renders go on), the Redis
    tier ``down`` with the clear text, and a request answered."""
    with RedisServer(tmp_path, cluster=True) as node:
        config = tmp_path / "voxcache.toml"
        config.write_text(f'tiers = ["memory", "disk", '
                          f'"redis+cluster://127.0.0.1:{node.port}"]\n')
        port = free_port()
        env = clean_env()
        proc = forked.popen([sys.executable, "-m", "voxcache", "--cache-dir",
                             str(tmp_path / "cache"), "--engine", "tone", "--config",
                             str(config), "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None
                with contextlib.suppress(httpx.HTTPError):
                    ready = httpx.get(f"{url}/readyz", timeout=5)
                    break
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert ready.status_code == 200, ready.text
            redis = ready.json()["tiers"]["redis"]
            assert redis["state"] == "down"
            assert "not ready: no master holds any hash slot" in redis["detail"], redis
            assert "IndexError" not in ready.text
            spoken = httpx.post(f"{url}/v1/audio/speech", json={"input": "Still here."},
                                timeout=30)
            assert spoken.status_code == 200
        finally:
            proc.terminate()
            proc.wait(timeout=30)
