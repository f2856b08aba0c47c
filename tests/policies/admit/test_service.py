"""The storing gate through a real ``voxcache serve --workers 2``: every route, headers,
nothing kept, callers counted across workers, figures on /metrics."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from gate_helpers import leaks, serve

ADMIN = "admin-key-00000001"
ALICE, BOB = "shop-key-alice-01", "shop-key-bob-0002"
CONFIG = f"""
[admission]
# the reason is the first class (in this order) a text falls in: the narrow ones first
never_store = ["email", "url", "phone", "money", "date", "time", "code", "re:(?i)okafor",
               "numbers", "digits"]
[tenants.shop]
api_keys = ["{ALICE}", "{BOB}"]
[tenants.shop.admission]
admit_after = 2
[admin]
api_keys = ["{ADMIN}"]
"""
TEXTS = {
    "digits": "Your order 48213 has shipped.",
    "numbers": "Order number forty-seven, please come to the counter.",
    "email": "We wrote to li.wei@example.com for you.",
    "url": "Track it at https://track.example.com/zq please.",
    "phone": "Call us back on 020 7946 0958.",
    "money": "Your balance is three hundred euros.",
    "date": "Your visit is on the second of December.",
    "time": "Your table is ready at half past seven.",
    "code": "Your pickup code is Q X 7 B.",
    "pattern": "Your table is ready, Mr Okafor.",
}
ROUTES = {
    "speech": lambda c, text: c.post("/v1/audio/speech", json={"input": text,
                                                               "response_format": "wav"}),
    "speech mp3": lambda c, text: c.post("/v1/audio/speech", json={"input": text,
                                                                   "response_format": "mp3"}),
    "speech pcm stream": lambda c, text: c.post("/v1/audio/speech", json={
        "input": text, "response_format": "pcm"}),
    "synthesize": lambda c, text: c.post("/v1/synthesize", json={"text": text}),
    "tts": lambda c, text: c.get("/tts", params={"text": text, "text_lang": "zh"}),
    "inference_sft": lambda c, text: c.post("/inference_sft",
                                            data={"tts_text": text, "spk_id": "alto"}),
}


def secrets_of(text: str) -> list[str]:
    """The text and what would identify it. Digit groups shorter than four are left to the
    whole text: "020" turns up by chance in any millisecond timestamp or stored audio."""
    return [text, *re.findall(r"\d{4,}", text), "li.wei", "Okafor", "track.example"]


def logged(output: str, needle: str) -> bool:
    """Whether the service's output (each line's timestamp left out) holds ``needle``; a
    digit group counts only whole, so "7946" is not found in "process 179460"."""
    lines = "\n".join(line.partition(" ")[2] for line in output.splitlines())
    if needle.isdigit():
        return re.search(rf"(?<!\d){needle}(?!\d)", lines) is not None
    return needle in lines


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("gate-serve")
    config = folder / "voxcache.toml"
    config.write_text(CONFIG, encoding="utf-8")
    cache = folder / "cache"
    answers: dict[tuple[str, str], httpx.Response] = {}
    with serve(cache, config, "--workers", "2") as (url, output):
        with httpx.Client(base_url=url, timeout=60, headers={"X-API-Key": ALICE}) as client:
            for route, call in ROUTES.items():
                for cls, text in TEXTS.items():
                    answers[(route, cls)] = call(client, text)
        with httpx.Client(base_url=url, timeout=60) as client:
            asks = [client.post("/v1/synthesize", json={"text": "Your table is ready."},
                                headers={"X-API-Key": key}) for key in (ALICE, ALICE, BOB, BOB)]
            # each worker folds its counts into the folder every 2 s: scrape until both did
            deadline = time.monotonic() + 20
            while True:
                metrics = client.get("/metrics", headers={"X-API-Key": ADMIN}).text
                if metrics.count(',stage="admission"} 6.0') >= len(TEXTS) or \
                        time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            dashboard = client.get("/v1/dashboard", headers={"X-API-Key": ADMIN}).json()
    return {"answers": answers, "asks": asks, "metrics": metrics, "dashboard": dashboard,
            "output": "".join(output), "cache": cache}


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_says_bypass_and_why(served, route: str) -> None:
    for cls in TEXTS:
        answer = served["answers"][(route, cls)]
        assert answer.status_code == 200, (route, cls, answer.text)
        assert answer.headers["x-cache"] == "BYPASS", (route, cls)
        assert answer.headers["x-cache-reason"] == f"admission:{cls}", (route, cls)
        assert len(answer.content) > 100
        for secret in secrets_of(TEXTS[cls]):
            assert secret not in answer.headers.get("x-cache-reason", "")


def test_nothing_of_a_refused_take_is_kept_or_logged(served) -> None:
    needles = [s for text in TEXTS.values() for s in secrets_of(text)]
    keys = {a.headers["x-cache-key"] for a in served["answers"].values()}
    assert leaks(served["cache"], needles + sorted(keys)) == []
    output = served["output"]
    assert "method=POST path=/v1/audio/speech" in output  # the access log is on
    for needle in needles + [key[:12] for key in keys]:
        assert not logged(output, needle), needle
    assert "reason=admission:digits" in output


def test_callers_are_counted_across_workers(served) -> None:
    asks = served["asks"]
    assert [a.headers["x-cache"] for a in asks] == ["BYPASS", "BYPASS", "MISS", "HIT"]
    assert [a.headers.get("x-cache-reason") for a in asks[:2]] == [
        "admission:admit_after"] * 2
    assert ALICE not in served["output"] and not leaks(served["cache"], [ALICE, BOB])


def test_refusals_are_counted_on_metrics_and_the_dashboard(served) -> None:
    metrics = served["metrics"]
    for cls in TEXTS:
        found = re.search(rf'voxcache_refusals_total{{reason="{cls}",stage="admission"}} '
                          r"([0-9.e+]+)", metrics)
        assert found and float(found.group(1)) >= len(ROUTES), cls
    assert 'voxcache_refusals_total{reason="runaway",stage="quality"} 0.0' in metrics
    assert 'voxcache_savings_hits_total{tenant="shop",voice="alto"} 1.0' in metrics
    by_reason = served["dashboard"]["refusals"]["by_reason"]
    assert by_reason["admission:admit_after"] == 2
    assert served["dashboard"]["savings"]["total"]["hits"] == 1


def test_a_faulty_engine_behind_serve_is_served_not_stored_and_counted(tmp_path: Path) -> None:
    config = tmp_path / "voxcache.toml"
    config.write_text("")
    reasons = {"runaway": "runaway", "truncated": "truncated", "silent": "silence",
               "clipped": "clipping"}
    text = "Please keep your belongings with you at all times."
    with serve(tmp_path / "c", config, engine="voxcache.testing.faulty:FaultyEngine") as (
            url, _output), httpx.Client(base_url=url, timeout=60) as client:
        for fault, reason in reasons.items():
            for _ in range(2):  # refused each time: never a hit
                answer = client.post("/v1/synthesize", json={
                    "text": text, "params": {"fault": fault}})
                assert answer.status_code == 200 and len(answer.content) > 1000
                assert (answer.headers["x-cache"], answer.headers["x-cache-reason"]) == (
                    "BYPASS", f"quality:{reason}"), fault
        good = [client.post("/v1/synthesize", json={"text": text}).headers["x-cache"]
                for _ in range(2)]
        assert good == ["MISS", "HIT"]
        metrics = client.get("/metrics").text
        stats = client.get("/v1/stats").json()["counters"]
    for reason in reasons.values():
        assert f'voxcache_refusals_total{{reason="{reason}",stage="quality"}} 2.0' in metrics
        assert stats[f"refused_quality_{reason}"] == 2
