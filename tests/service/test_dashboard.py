"""The dashboard in a real browser (Debian's chromium driven by Playwright).

After a scripted mix of hits and misses against a live server: every chart has
drawn data (pixels in its series' colours, not an empty canvas), the hit-rate
figure is the one ``/v1/stats`` gives, the top-misses list shows the phrase that
was missed, and its warm button (a background-priority render through the
public API) turns the next request for it into a HIT; its pin button pins it.
Screenshots at 1400 px and 390 px are saved under the test's tmp path
(``VOXCACHE_UPDATE_SCREENSHOT=1`` also copies the wide one to docs/operating/dashboard.png).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operating"
needs_chromium = pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium")
INTERVAL = 0.5
"""Seconds per sample (the shortest ``[dashboard] interval``): the waits below are counted in
samples, so a shorter one proves the same in less time."""

CHARTS_JS = """() => {
  const out = {};
  for (const [id, u] of Object.entries(window.vxCharts)) {
    const withData = u.series.slice(1).map(
      (_, i) => u.data[i + 1].some((v) => v !== null && v !== undefined));
    const { left, top, width, height } = u.bbox;
    const img = u.ctx.getImageData(left, top, Math.max(1, width), Math.max(1, height)).data;
    const colors = u.vxColors.filter((_, i) => withData[i]).map((hex) =>
      [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16)));
    let painted = 0;
    for (let p = 0; p < img.length; p += 4) {
      if (img[p + 3] < 200) continue;
      if (colors.some(([r, g, b]) =>
          Math.abs(img[p] - r) + Math.abs(img[p + 1] - g) + Math.abs(img[p + 2] - b) < 60))
        painted++;
    }
    out[id] = { series: withData, points: u.data[0].length, painted };
  }
  return out;
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One chromium for the module (~2.7 CPU-s a launch); each test's page has a browser
    context of its own, so no storage or cookie is shared between tests."""
    if not shutil.which("chromium"):
        pytest.skip("needs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


def _speech(url: str, text: str, fmt: str = "wav", key: str | None = None) -> httpx.Response:
    """Speak ``text`` (as the tenant of API ``key``, if given) and insist on a 200."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answer = httpx.post(f"{url}/v1/audio/speech", json={"input": text, "response_format": fmt},
                        headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer


def _stats_hit_rate(url: str) -> tuple[float, int, int]:
    counters = httpx.get(f"{url}/v1/stats").json()["counters"]
    hits = sum(v for k, v in counters.items() if k.startswith("hits_"))
    misses = counters.get("misses", 0)
    return hits / (hits + misses), hits, hits + misses


@needs_chromium
def test_type_speak_listen_and_see_how_it_was_served(tone_server, browser) -> None:
    from playwright.sync_api import expect

    live, cached = tone_server
    page = browser.new_page()
    try:
        page.goto(live.url + "/")
        expect(page.locator("#voice option")).to_have_count(2)  # alto, bass
        page.fill("#text", "Hello from the browser.")
        page.select_option("#voice", "bass")
        page.click("#speak")
        expect(page.locator("#xcache")).to_have_text("MISS")
        expect(page.locator("#tier")).to_have_text("engine")
        page.click("#speak")
        expect(page.locator("#xcache")).to_have_text("HIT")
        expect(page.locator("#tier")).to_have_text("memory")
        assert page.eval_on_selector("#player", "a => a.src").startswith("blob:")
        expect(page.locator("#hit-detail")).to_contain_text("1 hits of 2 lookups")
        page.select_option("#format", "mp3")
        page.click("#speak")
        expect(page.locator("#xcache")).to_have_text("HIT")  # a new format, not a render
        page.fill("#text", "   ")
        page.click("#speak")
        expect(page.locator("#error")).to_contain_text("400")
    finally:
        page.close()
    assert cached.engine.calls == ["Hello from the browser."]


@pytest.mark.piper
@needs_chromium
def test_dashboard_draws_a_mix_of_hits_and_misses_and_warms_a_missed_phrase(
        make_app, live, piper, tmp_path, browser) -> None:
    """End to end with Piper: charts drawn, hit rate as /v1/stats says, warm → HIT, pin."""
    from playwright.sync_api import expect

    app, cached = make_app(engine=piper, segments=True,
                           sections={"dashboard": {"interval": INTERVAL}})
    evicted = "Platform four is now closed."
    with live(app) as server:
        url = server.url
        time.sleep(1.5 * INTERVAL)  # the samplers' first bucket: the baseline rates are from
        for round_ in range(3):  # spread over a few buckets, so each chart has a line
            _speech(url, "Your order is ready.")
            _speech(url, "Your order is ready.", "mp3")
            _speech(url, f"Ticket number {round_ + 41}, please.")
            _speech(url, "Thank you for waiting.")
            time.sleep(1.1 * INTERVAL)
        key = _speech(url, evicted).headers["x-cache-key"]
        evicting = httpx.delete(f"{url}/v1/entries/{key}", timeout=60)
        assert evicting.status_code == 204  # as if evicted
        assert httpx.get(f"{url}/v1/audio/{key}", timeout=60).status_code == 404
        assert httpx.post(f"{url}/v1/audio/speech", json={"input": "x", "voice": "nobody"},
                          timeout=60).status_code == 400
        time.sleep(2.5 * INTERVAL)  # two more samples: the last requests are in the history
        renders_before = httpx.get(f"{url}/v1/stats").json()["counters"]["syntheses"]

        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            sent: list[dict[str, str]] = []
            page.on("request", lambda r: sent.append(
                {"url": r.url, "method": r.method, **r.headers}))
            page.goto(url + "/")
            page.wait_for_function("() => document.body.dataset.refreshed")

            charts = page.evaluate(CHARTS_JS)
            assert set(charts) == {"chart-hit-rate", "chart-latency", "chart-ttfa",
                                   "chart-renders", "chart-requests", "chart-storage"}
            for name, chart in charts.items():
                assert any(chart["series"]), (name, chart)
                assert chart["painted"] > 20, (name, chart)  # lines drawn, not an empty canvas

            value, hits, lookups = _stats_hit_rate(url)
            shown = page.locator("#hit-rate")
            assert float(shown.get_attribute("data-value")) == pytest.approx(value, abs=1e-12)
            assert (int(shown.get_attribute("data-hits")),
                    int(shown.get_attribute("data-lookups"))) == (hits, lookups)
            expect(shown).to_have_text(f"{100 * value:.1f} %")

            row = page.locator("#top-misses tr", has_text=evicted)
            expect(row).to_have_count(1)
            row.locator("button.warm").click()
            expect(row.locator("small.status")).to_have_text("warmed", timeout=60_000)
            warms = [r for r in sent if r["url"].endswith("/v1/synthesize")]
            assert len(warms) == 1 and warms[0]["x-voxcache-priority"] == "background"
            again = _speech(url, evicted)
            assert (again.headers["x-cache"], again.headers["x-cache-key"]) == ("HIT", key)
            stats = httpx.get(f"{url}/v1/stats").json()["counters"]
            assert stats["syntheses"] == renders_before + 1  # the warm's render, no other

            assert not cached.cache.folder.is_pinned(key)
            row.locator("button.pin").click()
            expect(row.locator("small.status")).to_have_text("pinned")
            assert cached.cache.folder.is_pinned(key)

            page.reload()
            page.wait_for_function("() => document.body.dataset.refreshed")
            page.screenshot(path=str(tmp_path / "dashboard-1400.png"), full_page=True)
            page.set_viewport_size({"width": 390, "height": 844})
            page.wait_for_timeout(500)  # the charts follow the width (ResizeObserver)
            overflow = page.evaluate("document.documentElement.scrollWidth")
            assert overflow <= 390, f"the page is {overflow} px wide on a 390 px phone"
            widths = page.evaluate("Object.values(window.vxCharts).map((u) => u.width)")
            assert all(w <= 390 for w in widths), widths
            page.screenshot(path=str(tmp_path / "dashboard-390.png"), full_page=True)
            assert errors == []
        finally:
            page.close()
    print(f"screenshots: {tmp_path / 'dashboard-1400.png'}, {tmp_path / 'dashboard-390.png'}")
    if os.environ.get("VOXCACHE_UPDATE_SCREENSHOT") == "1":
        shutil.copy(tmp_path / "dashboard-1400.png", DOCS / "dashboard.png")


@needs_chromium
def test_a_warm_click_pressed_before_a_poll_and_released_after_it_still_warms(
        make_app, live, browser) -> None:
    """The tables are drawn again at every poll. A browser drops a click whose pressed
    element left the page before the release, so a poll that rebuilt the row between the two
    would lose the click: the row must be refreshed in place."""
    from playwright.sync_api import expect

    app, cached = make_app(sections={"dashboard": {"interval": 1}})
    phrase = "Press, wait for a poll, release."
    with live(app) as server:
        key = _speech(server.url, phrase).headers["x-cache-key"]
        assert httpx.delete(f"{server.url}/v1/entries/{key}", timeout=60).status_code == 204
        page = browser.new_page()
        try:
            page.goto(server.url + "/")
            row = page.locator("#top-misses tr", has_text=phrase)
            button = row.locator("button.warm")
            expect(button).to_be_enabled()
            button.scroll_into_view_if_needed()
            box = button.bounding_box()
            assert box is not None
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            drawn = page.evaluate("document.body.dataset.refreshed")
            page.mouse.down()
            page.wait_for_function(
                "(drawn) => document.body.dataset.refreshed !== drawn", arg=drawn)
            page.mouse.up()
            expect(row.locator("small.status")).to_have_text("warmed")
        finally:
            page.close()
    assert cached.engine.calls == [phrase, phrase]


@needs_chromium
def test_a_phrase_that_is_markup_stays_text(make_app, live, browser) -> None:
    """A tenant's phrase is shown to the admin as text: markup in it never runs, and the
    page's policy would not let an injected inline script run either."""
    from playwright.sync_api import expect

    app, _ = make_app(sections={"dashboard": {"interval": 1}})
    attack = 'Hi <img src=x onerror="window.pwned=1"><script>window.pwned=2</script> there.'
    with live(app) as server:
        _speech(server.url, attack)
        page_answer = httpx.get(server.url + "/")
        policy = page_answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split(
            "script-src")[1].split(";")[0]
        page = browser.new_page()
        try:
            page.goto(server.url + "/")
            cell = page.locator("#top-misses td.text").first
            expect(cell).to_contain_text('<img src=x onerror="window.pwned=1">')
            assert page.evaluate("window.pwned") is None
            assert page.locator("#top-misses img, #top-misses script").count() == 0
        finally:
            page.close()


@needs_chromium
def test_a_tenant_key_sees_its_own_phrases_and_an_admin_key_cannot_warm(
        make_app, live, browser) -> None:
    """Keys configured: the page asks for one; a tenant's key shows that tenant's own
    misses (warmable); an admin key shows every tenant's, with warm disabled (an admin
    key does not render)."""
    from playwright.sync_api import expect

    sections = {"tenants": {"acme": {"api_keys": ["acme-key-1234"]},
                            "globex": {"api_keys": ["globex-key-123"]}},
                "admin": {"api_keys": ["admin-key-1234"]}, "dashboard": {"interval": 1}}
    app, _ = make_app(sections=sections)
    with live(app) as server:
        for key, text in (("acme-key-1234", "Acme says hello."),
                          ("globex-key-123", "Globex says hello.")):
            _speech(server.url, text, key=key)
        page = browser.new_page()
        try:
            page.goto(server.url + "/")
            expect(page.locator("#dash-error")).to_contain_text("401")
            expect(page.locator("#tops")).to_be_hidden()
            page.fill("#apikey", "acme-key-1234")
            page.dispatch_event("#apikey", "change")
            expect(page.locator("#top-misses")).to_contain_text("Acme says hello.")
            expect(page.locator("#top-misses")).not_to_contain_text("Globex")
            expect(page.locator(".admin-only").first).to_be_hidden()
            assert page.locator("#top-misses button.warm").first.is_enabled()
            page.fill("#apikey", "admin-key-1234")
            page.dispatch_event("#apikey", "change")
            expect(page.locator("#top-misses")).to_contain_text("Globex says hello.")
            expect(page.locator("#hit-rate")).to_be_visible()
            warm = page.locator("#top-misses button.warm").first
            assert warm.is_disabled()
            assert "tenant's own key" in (warm.get_attribute("title") or "")
        finally:
            page.close()
