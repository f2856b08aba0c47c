"""``GET /v1/dashboard``, the page's files and the shared history, attacked.

Who sees what (keys), what ``/static/`` will hand out, what a planted symlink, a
damaged or a locked history file does (nothing to the service: it falls back to
its own figures, counts the fault and starts a fresh file), and what two apps
sharing a cache folder — two workers — export on ``/metrics``.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from voxcache.errors import InvalidParameter
from voxcache.testing import forked
from voxcache.tiers.index import Index

ACME, GLOBEX, ADMIN = "acme-key-1234", "globex-key-123", "admin-key-1234"
KEYED = {"tenants": {"acme": {"api_keys": [ACME]}, "globex": {"api_keys": [GLOBEX]}},
         "admin": {"api_keys": [ADMIN]}}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def speak(client: TestClient, text: str, key: str | None = None, fmt: str = "wav") -> str:
    answer = client.post("/v1/audio/speech", json={"input": text, "response_format": fmt},
                         headers=bearer(key) if key else {})
    assert answer.status_code == 200, answer.text
    return answer.headers["x-cache"]


def requests_total(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("voxcache_requests_total{"))


# -- who sees what ------------------------------------------------------------------------
def test_keys_decide_whose_figures_the_dashboard_shows(make_app) -> None:
    app, cached = make_app(sections=KEYED)
    with TestClient(app) as client:
        speak(client, "Acme only phrase.", ACME)
        speak(client, "Acme only phrase.", ACME)
        speak(client, "Globex secret phrase.", GLOBEX)

        missing = client.get("/v1/dashboard")
        assert missing.status_code == 401
        assert "[admin] api_keys" in missing.json()["error"]["message"]
        assert client.get("/v1/dashboard", headers=bearer("not-a-key-at-all")).status_code == 401

        acme = client.get("/v1/dashboard", headers=bearer(ACME))
        assert acme.status_code == 200
        doc = acme.json()
        assert (doc["scope"], doc["tenant"]) == ("tenant", "acme")
        assert "Globex" not in acme.text  # not a text, not a count, not a key of theirs
        assert {"hit_rate", "series", "requests", "renders", "latency"}.isdisjoint(doc)
        assert "tiers" not in doc["service"] and "workers" not in doc["service"]
        assert [r["text"] for r in doc["top_misses"]] == ["Acme only phrase."]
        assert [r["text"] for r in doc["top_hits"]] == ["Acme only phrase."]
        assert doc["top_misses"][0]["can_warm"] is True
        assert doc["usage"] == {"asked": 2, "missed": 1, "hit_rate": 0.5}
        owned = cached.cache.folder.index.query(
            "SELECT COUNT(*), SUM(size) FROM entries WHERE tenant = 'acme'")[0]
        assert (doc["storage"]["entries"], doc["storage"]["bytes"]) == owned

        admin = client.get("/v1/dashboard", headers=bearer(ADMIN)).json()
        assert admin["scope"] == "admin"
        texts = {r["text"]: r for r in admin["top_misses"]}
        assert set(texts) == {"Acme only phrase.", "Globex secret phrase."}
        assert all(not r["can_warm"] and "tenant's own key" in r["why_not"]
                   for r in texts.values())
        assert admin["hit_rate"]["hits"] == 1 and admin["hit_rate"]["misses"] == 2


def test_without_keys_everything_is_open_and_warmable(make_app) -> None:
    app, _ = make_app()
    with TestClient(app) as client:
        speak(client, "Open house.")
        doc = client.get("/v1/dashboard").json()
        assert doc["scope"] == "admin"
        row = doc["top_misses"][0]
        assert (row["text"], row["can_warm"], row["stored"]) == ("Open house.", True, True)
        assert row["request"]["text"] == "Open house."


def test_an_upstream_is_shown_without_its_credentials() -> None:
    from voxcache.service.dashboard_figures import _upstream

    shown = _upstream("openai=https://user:s3cret@api.example.com:8443/v1/audio?token=abc")
    assert shown == {"kind": "openai", "address": "https://api.example.com:8443"}
    assert _upstream("gpt-sovits=http://host:notaport/x") == {
        "kind": "gpt-sovits", "address": "http://host"}
    assert _upstream(None) is None


# -- what /static/ hands out ----------------------------------------------------------
def test_static_serves_only_the_shipped_files(make_app) -> None:
    app, _ = make_app()
    client = TestClient(app)
    lib = client.get("/static/vendor/uPlot.iife.min.js")
    assert lib.status_code == 200 and "uPlot" in lib.text[:200]
    assert lib.headers["content-type"].startswith("text/javascript")
    assert client.get("/static/vendor/uPlot.min.css").status_code == 200
    assert client.get("/static/dashboard.js").status_code == 200
    for path in ("/static/../app.py", "/static/vendor/../../app.py", "/static/%2e%2e/app.py",
                 "/static/vendor/%2e%2e/%2e%2e/history.py", "/static/vendor/README.md",
                 "/static/dashboard.html", "/static//etc/passwd", "/static/vendor/uPlot.LICENSE",
                 "/static/%2fetc%2fpasswd"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "root:" not in answer.text and "def " not in answer.text, path
    page = client.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]


# -- the shared history under attack -------------------------------------------------------
def test_a_symlink_planted_as_the_history_is_never_followed(make_app, tmp_path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "history.sqlite3").symlink_to(outside)
    app, cached = make_app(cache_dir=cache_dir)
    with TestClient(app) as client:
        speak(client, "Still served.")
        metrics = client.get("/metrics").text
        assert requests_total(metrics) == 1.0
        doc = client.get("/v1/dashboard").json()
        assert doc["requests"]["total"] == 1
    assert outside.read_text() == "precious"
    # the old history file's name: the link is set aside unfollowed, never opened
    assert not os.path.lexists(cache_dir / "history.sqlite3")
    assert any(p.name.startswith("history.sqlite3.") and p.is_symlink()
               for p in (cache_dir / "quarantine").iterdir())


def test_a_damaged_old_history_file_is_set_aside(make_app, tmp_path) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "history.sqlite3").write_bytes(b"not a database at all " * 300)
    app, cached = make_app(cache_dir=cache_dir)
    with TestClient(app) as client:
        speak(client, "One.")
        speak(client, "One.")
        first = client.get("/metrics").text  # may be this worker's own figures only
        assert requests_total(first) == 2.0
        doc = client.get("/v1/dashboard").json()
        assert doc["service"]["shared"] is True and doc["requests"]["total"] == 2
    with sqlite3.connect(cache_dir / "index.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert not (cache_dir / "history.sqlite3").exists()
    assert any(p.name.startswith("history.sqlite3.") for p in (cache_dir / "quarantine").iterdir())


HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_locked_history_leaves_scrapes_answering_with_this_workers_figures(
        make_app, tmp_path) -> None:
    app, cached = make_app()
    with TestClient(app) as client:
        speak(client, "Before the lock.")
        client.get("/metrics")  # the history exists and holds one request
        holder = forked.popen([sys.executable, "-c", HOLD_LOCK,
                               str(cached.cache.root / "index.sqlite3"), "30"],
                              stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            speak(client, "During the lock.")
            started = time.monotonic()
            metrics = client.get("/metrics")
            assert time.monotonic() - started < 5  # a bounded wait, not the holder's 30 s
            assert metrics.status_code == 200 and requests_total(metrics.text) == 2.0
            doc = client.get("/v1/dashboard").json()
            assert doc["service"]["shared"] is False and doc["requests"]["total"] == 2
        finally:
            holder.kill()
            holder.wait()
        doc = client.get("/v1/dashboard").json()
        assert doc["service"]["shared"] is True and doc["requests"]["total"] == 2
    assert cached.cache.stats()["counters"].get("history_errors", 0) >= 1


def test_the_history_is_private(make_app) -> None:
    app, cached = make_app()
    with TestClient(app) as client:
        speak(client, "Private figures.")
        client.get("/v1/dashboard")
    paths = list(cached.cache.root.glob("index.sqlite3*"))
    assert paths
    for path in paths:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@pytest.mark.parametrize(("table", "message"), [
    ({"interval": 0}, "interval must be 0.5 to 60 seconds"),
    ({"interval": "nan"}, "interval must be 0.5 to 60 seconds"),
    ({"interval": "fast"}, "interval must be 0.5 to 60 seconds"),
    ({"window": 1e12}, "window must be 60 to 86400 seconds"),
    ({"intervall": 5}, "unknown setting(s) intervall"),
])
def test_dashboard_settings_are_checked(make_app, table, message) -> None:
    with pytest.raises(InvalidParameter) as refused:
        make_app(sections={"dashboard": table})
    assert message in str(refused.value)


# -- two apps on one folder: two workers -------------------------------------------------
def test_every_worker_exports_the_totals_of_all_of_them(make_app, tmp_path) -> None:
    """Two apps over one cache folder stand for two worker processes: a scrape of either
    shows what both served (the other's figures as of its last publication, at most one
    interval old), and scrapes alternating between them never go down (a smaller value
    reads as a counter reset to Prometheus)."""
    folder = tmp_path / "shared"
    sections = {"dashboard": {"interval": 0.5}}
    first, _ = make_app(cache_dir=folder, sections=sections)
    second, _ = make_app(cache_dir=folder, sections=sections)
    with TestClient(first) as a, TestClient(second) as b:
        served, seen = 0, []
        for step in range(24):
            speaker, scraper = (a, b) if step % 3 else (b, a)
            speak(speaker, f"Phrase {step % 5}.")
            served += 1
            seen.append(requests_total(scraper.get("/metrics").text))
        assert seen == sorted(seen), seen
        time.sleep(1.2)  # both samplers publish
        for client in (a, b):
            metrics = client.get("/metrics").text
            assert requests_total(metrics) == served
            assert "voxcache_workers 2.0" in metrics
        doc = a.get("/v1/dashboard").json()
        assert doc["requests"]["total"] == served
        assert sorted(w["requests"] for w in doc["service"]["workers"]) == [8, 16]


def test_an_exited_workers_counts_stay_in_the_totals(tmp_path) -> None:
    from voxcache.service.history import RETIRED, History, sample

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    past = [time.time() - 600]
    index = Index(tmp_path / "index.sqlite3")
    old = History(index, 1.0, 3600.0, clock=lambda: past[0])
    counted = {sample("voxcache_requests_total", cache="HIT", code="200", route="speech"): 7.0}
    old.publish(counted, {})
    with sqlite3.connect(tmp_path / "index.sqlite3") as db:
        db.execute("UPDATE history_workers SET pid = ?", (dead_pid,))
    live = History(index, 1.0, 3600.0)
    live.publish({next(iter(counted)): 2.0}, {})
    live.trim()
    assert live.totals() == {next(iter(counted)): 9.0}
    with sqlite3.connect(tmp_path / "index.sqlite3") as db:
        workers = [row[0] for row in db.execute("SELECT worker FROM history_workers")]
        owners = {row[0] for row in db.execute("SELECT worker FROM history_totals")}
    assert workers == [live.worker] and owners == {live.worker, RETIRED}


def test_quantiles_follow_prometheus_interpolation() -> None:
    from voxcache.service.history import quantile

    cumulative = {0.1: 2.0, 0.5: 6.0, 1.0: 8.0, float("inf"): 10.0}
    assert quantile(0.5, cumulative) == pytest.approx(0.1 + 0.4 * (5 - 2) / 4)
    assert quantile(0.95, cumulative) == 1.0  # in +Inf: the last finite bound
    assert quantile(0.1, cumulative) == pytest.approx(0.05)
    assert quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None


def test_response_timing_counts_audio_answers_by_how_they_were_served(make_app) -> None:
    app, _ = make_app()
    with TestClient(app) as client:
        speak(client, "Timed.")
        speak(client, "Timed.")
        speak(client, "Timed.", fmt="mp3")
        client.post("/v1/audio/speech", json={"input": "x", "voice": "nobody"})  # no X-Cache
        metrics = client.get("/metrics").text
    assert 'voxcache_request_seconds_count{cache="MISS"} 1.0' in metrics
    assert 'voxcache_request_seconds_count{cache="HIT"} 2.0' in metrics
    assert "OTHER" not in metrics


def test_history_keeps_only_its_window(tmp_path) -> None:
    from voxcache.service.history import History, sample

    clock = [1_000_000.0]
    history = History(Index(tmp_path / "index.sqlite3"), 1.0, 60.0, clock=lambda: clock[0])
    name = sample("voxcache_requests_total", cache="MISS", code="200", route="speech")
    for step in range(200):
        clock[0] += 1
        history.publish({name: float(step)}, {sample("voxcache_workers"): 1.0})
    history.trim()
    deltas, levels = history.buckets(0)
    assert len(deltas) <= 62 and len(levels) <= 62
    assert history.totals() == {name: 199.0}
    assert os.path.getsize(tmp_path / "index.sqlite3") < 1 << 20
    assert Path(tmp_path / "index.sqlite3").exists()


def test_the_charts_hit_rate_is_hits_over_lookups_over_the_trailing_minute(tmp_path) -> None:
    from voxcache.service.dashboard_series import SeriesMemo, series
    from voxcache.service.history import History, sample

    clock = [1_800_000_000.0]
    history = History(Index(tmp_path / "index.sqlite3"), 10.0, 3600.0, clock=lambda: clock[0])
    hit = sample("voxcache_requests_total", route="speech", cache="HIT", code="200")

    def bucket(memory: int, disk: int, misses: int, served: float) -> None:
        folder = {sample("voxcache_cache_events_total", event="hits_memory"): memory,
                  sample("voxcache_cache_events_total", event="hits_disk"): disk,
                  sample("voxcache_cache_events_total", event="misses"): misses}
        history.publish({hit: served}, {sample("voxcache_renders_running"): 0.0}, folder)
        clock[0] += 10

    bucket(0, 0, 0, 0.0)   # the baseline
    bucket(3, 1, 4, 4.0)   # 4 hits of 8 lookups, 4 requests served in 10 s
    bucket(3, 1, 4, 4.0)   # idle
    for _ in range(6):
        bucket(3, 1, 4, 4.0)  # the baseline leaves the trailing minute
    memo = SeriesMemo()
    for _ in range(2):  # the second time through the memo of settled buckets
        drawn = series(history, ["memory", "disk"], clock[0] - 10, memo)
        rates = drawn["hit_rate"]
        assert rates["all"][:3] == [None, 0.5, 0.5]
        assert rates["memory"][:3] == [None, 0.375, 0.375]
        assert rates["disk"][:3] == [None, 0.125, 0.125]
        assert rates["all"][-1] is None  # no lookups in the last minute: nothing to say
        assert drawn["requests_per_second"]["hits"][:3] == [0.0, 0.4, 0.0]
        assert drawn["running"][:3] == [0.0, 0.0, 0.0]


def test_damage_met_through_the_history_starts_the_index_repair(tmp_path) -> None:
    """The history is a table of the index database: damage it meets is the index's, so it
    asks for the index's repair (one repair path) instead of setting a file of its own aside."""
    from voxcache.service.history import History, HistoryUnavailable, sample

    index = Index(tmp_path / "index.sqlite3")
    repairs: list[int] = []
    faults: list[str] = []
    history = History(index, 1.0, 60.0, report=lambda area, *_: faults.append(area),
                      damaged=lambda: repairs.append(1))
    name = sample("voxcache_requests_total", cache="MISS", code="200", route="speech")
    history.publish({name: 1.0}, {})
    index.close()
    with open(tmp_path / "index.sqlite3", "r+b") as f:  # garbage in place: same inode
        f.write(b"not a database at all " * 300)
    with pytest.raises(HistoryUnavailable):
        history.publish({name: 2.0}, {})
    assert repairs == [1] and faults == ["history"]
