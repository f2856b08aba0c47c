"""``/docs`` and ``/redoc`` with no internet: Debian's chromium (driven by Playwright) loads
each page from a live server with every request that is not to the server itself blocked,
and the UI must render — the title, the API's routes — with not one request blocked (so
nothing on the page even tried to reach a CDN or Google's fonts: the pages' Content-Security-
Policy keeps the browser from asking for ReDoc's logo on a CDN at all).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-background-networking"]
VENDOR = Path(__file__).resolve().parents[2] / "src" / "voxcache" / "service" / "static" / "vendor"
needs_chromium = pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium")


def load_offline(url: str, check: str) -> tuple[list[str], list[str], object]:
    """Open ``url`` with the outside world cut off; run ``check`` (a function of the page);
    (blocked requests, requests made, what ``check`` returned)."""
    from playwright.sync_api import sync_playwright

    blocked: list[str] = []
    made: list[str] = []

    def route(r) -> None:  # type: ignore[no-untyped-def]
        made.append(r.request.url)
        host = urlsplit(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort("internetdisconnected")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", route)
            page.goto(url, wait_until="load")
            result = globals()[check](page)
        finally:
            browser.close()
    return blocked, made, result


def swagger_rendered(page) -> list[str]:  # type: ignore[no-untyped-def]
    page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "voxcache" in page.inner_text(".swagger-ui .info .title")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    return page.locator(".opblock-summary-path").all_inner_texts()


def redoc_rendered(page) -> str:  # type: ignore[no-untyped-def]
    page.wait_for_selector(".api-info h1", timeout=30_000)
    page.get_by_text("/v1/audio/speech").first.wait_for(timeout=30_000)
    return page.inner_text(".api-info h1")


@needs_chromium
def test_swagger_ui_renders_with_the_internet_cut_off(tone_server) -> None:
    live, _ = tone_server
    blocked, made, paths = load_offline(f"{live.url}/docs", "swagger_rendered")
    assert blocked == [], f"the page asked the internet for {blocked}"
    assert "/v1/audio/speech" in paths and "/v1/audio/{key}" in paths, paths
    assert any(u.endswith("/static/vendor/swagger-ui-bundle.js") for u in made), made
    assert any(u.endswith("/openapi.json") for u in made)


@needs_chromium
def test_redoc_renders_with_the_internet_cut_off(tone_server) -> None:
    live, _ = tone_server
    blocked, made, title = load_offline(f"{live.url}/redoc", "redoc_rendered")
    assert blocked == [], f"the page asked the internet for {blocked}"
    assert str(title).startswith("voxcache")
    assert any(u.endswith("/static/vendor/redoc.standalone.js") for u in made), made


def test_the_pages_name_no_host_but_the_server(tone_server) -> None:
    """What the HTML itself references (the browser test above sees what is fetched)."""
    live, _ = tone_server
    for path in ("/docs", "/redoc"):
        page = httpx.get(f"{live.url}{path}")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        html = page.text
        assert not re.search(r"(src|href)=\"https?://", html), html
        assert "cdn.jsdelivr.net" not in html and "fonts.googleapis" not in html
    oauth = httpx.get(f"{live.url}/docs/oauth2-redirect")
    assert oauth.status_code == 200 and "oauth2" in oauth.text.lower()
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js",
                 "swagger-ui-favicon-32x32.png"):
        served = httpx.get(f"{live.url}/static/vendor/{name}")
        assert served.status_code == 200 and served.content == (VENDOR / name).read_bytes()
    assert httpx.get(f"{live.url}/static/vendor/swagger-ui-bundle.js.map").status_code == 404
    assert httpx.get(f"{live.url}/static/vendor/README.md").status_code == 404


def test_every_vendored_file_is_the_pinned_one_with_its_licence() -> None:
    table = dict(re.findall(r"^\| `([^`]+)` \| .+ \| `([0-9a-f]{64})` \|$",
                            (VENDOR / "README.md").read_text(), re.MULTILINE))
    shipped = {p.name for p in VENDOR.iterdir() if p.name != "README.md"}
    assert shipped == set(table), shipped ^ set(table)
    for name, digest in table.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    for library in ("uPlot", "swagger-ui", "redoc"):
        assert (VENDOR / f"{library}.LICENSE").stat().st_size > 500
