"""``/readyz`` and ``/metrics`` say whether the upstream (a gateway's) or the center (an edge's)
answers: killed, stopped, back — with real processes on both sides (Piper's own HTTP
server behind a gateway; a ``voxcache serve`` center behind an edge).

Before, both said "ready" with memory and disk only, and no series could raise an alert.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.packs.nodes import serve, write_config

from .servers import piper_http_server, wait_until

pytestmark = pytest.mark.piper


def ready(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=10)


def gauges(url: str) -> dict[tuple[str, str], float]:
    """(family, role) → value of the upstream families on ``/metrics``."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {(family.name, sample.labels["role"]): sample.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("voxcache_upstream_") for sample in family.samples}


def test_a_killed_upstream_is_reported_and_the_gateway_stays_ready(tmp_path: Path) -> None:
    with piper_http_server(tmp_path) as piper, \
            serve(tmp_path / "cache", "--upstream", f"piper-http={piper.url}") as gateway:
        up = ready(gateway.url)
        up_metrics = gauges(gateway.url)
        assert gateway.say("Platform two.").headers["x-cache"] == "MISS"
        killed_at = time.time()
        piper.process.kill()
        piper.process.wait(10)
        miss = gateway.say("Platform three.")  # the call that finds it gone
        down = ready(gateway.url)
        down_metrics = gauges(gateway.url)
        hit = gateway.say("Platform two.")

    assert up.status_code == 200
    assert up.json()["upstream"] == {
        "kind": "piper-http", "url": piper.url, "reachable": True,
        "since": up.json()["upstream"]["since"], "last_error": None, "last_error_at": None}
    assert up_metrics[("voxcache_upstream_up", "upstream")] == 1.0
    assert miss.status_code == 502
    assert down.status_code == 200 and down.json()["status"] == "ready"  # hits are served
    state = down.json()["upstream"]
    assert state["reachable"] is False and state["since"] >= killed_at
    assert "unreachable" in state["last_error"] and state["last_error_at"] >= killed_at
    assert down_metrics[("voxcache_upstream_up", "upstream")] == 0.0
    assert down_metrics[("voxcache_upstream_since_timestamp_seconds", "upstream")] == \
        pytest.approx(state["since"], abs=0.01)
    assert hit.status_code == 200 and hit.headers["x-cache"] == "HIT"


def test_a_stopped_center_is_found_by_a_probe_and_makes_a_required_edge_unready(
        tmp_path: Path) -> None:
    """No miss after the center stops: the probe behind /readyz notices on its own; with
    ``upstream_required`` the edge is unready while it lasts, and ready again after."""
    config = write_config(tmp_path / "edge.toml", "[service]\nupstream_required = true\n")
    with serve(tmp_path / "center") as center, \
            serve(tmp_path / "edge", "--upstream", f"voxcache={center.url}",
                  config=config) as edge:
        assert edge.say("Mind the gap.").headers["x-cache"] == "MISS"
        before = ready(edge.url).json()["center"]
        stopped_at = time.time()
        center.stop()
        wait_until(lambda: ready(edge.url).status_code == 503, limit=30,
                   what="the edge to notice its center is gone")
        down = ready(edge.url)
        down_metrics = gauges(edge.url)
        hit = edge.say("Mind the gap.")
        with serve(tmp_path / "center", port=center.port):
            wait_until(lambda: ready(edge.url).status_code == 200, limit=30,
                       what="the edge to see its center again")
            back = ready(edge.url).json()["center"]

    assert before["reachable"] is True and before["url"] == center.url
    assert down.json()["status"] == "unready"
    state = down.json()["center"]
    assert state["reachable"] is False and state["since"] >= stopped_at
    assert "did not answer" in state["last_error"] or "unreachable" in state["last_error"]
    assert down_metrics[("voxcache_upstream_up", "center")] == 0.0
    assert hit.status_code == 200 and hit.headers["x-cache"] == "HIT"
    assert back["reachable"] is True and back["since"] > state["since"]
