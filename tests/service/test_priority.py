"""Warm-up jobs run at the lowest priority; `voxcache warm --server` goes through a service."""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx

from voxcache.scheduling import BACKGROUND, INTERACTIVE, Admission
from voxcache.testing import forked


def test_queued_interactive_renders_start_before_background_ones() -> None:
    admission = Admission(concurrency=1, queue=10, io_threads=1)
    gate, order = threading.Event(), []

    def render(name: str, priority: int) -> None:
        with admission.slot(priority):
            if name == "blocker":
                gate.wait(10)
            order.append(name)

    blocker = admission.submit(render, "blocker", INTERACTIVE)
    while admission.running < 1:
        time.sleep(0.001)
    jobs = []
    for count, (name, priority) in enumerate((("warm-1", BACKGROUND), ("warm-2", BACKGROUND),
                                              ("listener", INTERACTIVE)), start=1):
        jobs.append(admission.submit(render, name, priority))
        while admission.queued < count:  # each is queued for the slot before the next
            time.sleep(0.001)
    gate.set()
    for job in (blocker, *jobs):
        job.result(10)
    admission.shutdown()
    assert order == ["blocker", "listener", "warm-1", "warm-2"]


def test_bad_priority_header_is_a_400(tone_server) -> None:
    live, _ = tone_server
    answer = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "hi"},
                        headers={"X-Voxcache-Priority": "urgent"}, timeout=60)
    assert answer.status_code == 400 and "X-Voxcache-Priority" in answer.text


def test_warm_through_a_running_service_renders_once_and_pins(tmp_path, tone_server) -> None:
    live, cached = tone_server
    phrases = tmp_path / "phrases.json"
    phrases.write_text(json.dumps({"phrases": [
        {"text": "Your order is ready.", "pin": True}, {"text": "Thank you for calling."},
        {"text": "Nobody speaks this.", "language": "tlh"}]}))

    def warm() -> dict:
        out = forked.run([sys.executable, "-m", "voxcache", "warm", str(phrases),
                          "--server", live.url, "--json"], capture_output=True, text=True,
                         timeout=120)
        assert out.returncode == 0, out.stderr  # an unspoken language is skipped, not failed
        return json.loads(out.stdout)

    first, second = warm(), warm()
    assert (first["rendered"], first["cached"], first["pinned"]) == (2, 0, 1)
    assert (first["skipped_languages"], first["failed"]) == ({"tlh": 1}, [])
    assert (second["rendered"], second["cached"]) == (0, 2)
    assert sorted(cached.engine.calls) == ["Thank you for calling.", "Your order is ready."]
    cached.cache.folder.flush()
    assert [r.text for r in cached.cache.folder.index.rows("pinned = 1")] == [
        "Your order is ready."]


def test_pin_routes_are_tenant_checked(tone_server) -> None:
    live, _ = tone_server
    made = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Pin me."}, timeout=60)
    key = made.headers["x-cache-key"]
    pinned = httpx.put(f"{live.url}/v1/entries/{key}/pin", params={"ttl": 60}, timeout=60)
    assert pinned.status_code == 204
    assert httpx.delete(f"{live.url}/v1/entries/{key}/pin", timeout=60).status_code == 204
    assert httpx.put(f"{live.url}/v1/entries/{'0' * 64}/pin", timeout=60).status_code == 404
