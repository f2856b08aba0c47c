"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) from copies shipped with the package.

FastAPI's own pages load both from a CDN (and ReDoc's fonts from Google), so on an
edge box without internet, or behind a proxy that blocks CDNs, they were blank. These
are the same pages (FastAPI's ``get_swagger_ui_html`` / ``get_redoc_html``) pointed at
the pinned copies in ``static/vendor/`` (versions, hashes and licences:
static/vendor/README.md), served by the one ``/static/`` route. Their
Content-Security-Policy lets a browser fetch nothing from anywhere but this server:
ReDoc's side menu links a logo on a CDN, which offline would only wait and fail.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

VENDOR = "/static/vendor"
SWAGGER_UI = ("swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui-favicon-32x32.png")
REDOC = ("redoc.standalone.js",)
POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
          "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
          "worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'self'")
"""Both pages start their UI with an inline script and inline styles; ReDoc runs its search
in a blob: worker; every fetch goes to this server (the schema at /openapi.json)."""


def install(app: FastAPI) -> None:
    """Add ``/docs``, its OAuth2 redirect and ``/redoc`` (create the app with
    ``docs_url=None, redoc_url=None`` so FastAPI adds its CDN ones)."""

    def root(request: Request) -> str:  # behind a proxy that mounts the app under a prefix
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        base = root(request)
        js, css, icon = (f"{base}{VENDOR}/{name}" for name in SWAGGER_UI)
        return _confined(get_swagger_ui_html(
            openapi_url=f"{base}{app.openapi_url}", title=f"{app.title} — Swagger UI",
            oauth2_redirect_url=f"{base}/docs/oauth2-redirect", swagger_js_url=js,
            swagger_css_url=css, swagger_favicon_url=icon))

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        return _confined(get_redoc_html(
            openapi_url=f"{base}{app.openapi_url}", title=f"{app.title} — ReDoc",
            redoc_js_url=f"{base}{VENDOR}/{REDOC[0]}",
            redoc_favicon_url=f"{base}{VENDOR}/{SWAGGER_UI[2]}", with_google_fonts=False))


def _confined(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = POLICY
    return page
