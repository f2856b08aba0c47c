"""The dashboard in a real browser (Debian's chromium driven by Playwright)."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium")
def test_type_speak_listen_and_see_how_it_was_served(tone_server) -> None:
    from playwright.sync_api import expect, sync_playwright

    live, cached = tone_server
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page()
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
            expect(page.locator("#stats")).to_contain_text("memory hits")
            page.select_option("#format", "mp3")
            page.click("#speak")
            expect(page.locator("#xcache")).to_have_text("HIT")  # a new format, not a render
            page.fill("#text", "   ")
            page.click("#speak")
            expect(page.locator("#error")).to_contain_text("400")
        finally:
            browser.close()
    assert cached.engine.calls == ["Hello from the browser."]
