"""One line per request on the ``voxcache.access`` logger: how each request was served.

``method path status cache tier key ms``: whether a complaint was a miss, a stale take or an
error, and which take. Never the text (the query string is dropped), never API keys, and
nothing a client could forge a line with (the path escaped). Pure ASGI and outermost, free
while the logger is below INFO; ``[service] access_log = false`` turns it off; a
``--workers`` process gets a stderr handler so every worker's lines reach one output.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..logs import stderr_handler

log = logging.getLogger("voxcache.access")
KEY_SHOWN = 12
"""Hex digits of the key logged: enough to find the take (``voxcache explain --key``)."""
PATH_SHOWN = 200
"""Longest path logged, in characters (a client decides how long a path is)."""
_SAFE_PATH = "/%-._~!$&'()*+,;=:@"


class AccessLog:
    """Pure ASGI middleware: log each HTTP request once its response is finished."""

    def __init__(self, app: ASGIApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled
        if enabled and not log.hasHandlers():
            _log_to_stderr()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.enabled or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen: dict[str, str] = {}

        async def noting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = str(message["status"])
                for name, value in message.get("headers", ()):
                    if name in _HEADERS:
                        seen[_HEADERS[name]] = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        finally:
            # A failed or cancelled request is logged too, with the status it got (if any).
            # makeRecord + handle is log.info without its stack walk for the caller's line
            # (meaningless here; about a third of the line's cost).
            reason = seen.get("reason")
            # a take refused by a text rule: its key (a hash of private text) is not logged
            key = "-" if reason and reason.startswith("admission:") else seen.get("key", "-")
            log.handle(log.makeRecord(log.name, logging.INFO, __file__, 0,
                                      _FORMAT_REASON if reason else _FORMAT, (
                scope["method"], _path(scope), seen.get("status", "-"), seen.get("cache", "-"),
                seen.get("tier", "-"), key[:KEY_SHOWN],
                (time.perf_counter() - started) * 1000, *((reason,) if reason else ())), None))


_FORMAT = "method=%s path=%s status=%s cache=%s tier=%s key=%s ms=%.1f"


_FORMAT_REASON = _FORMAT + " reason=%s"
"""A take the storing gate refused: why (``admission:<class>``, ``quality:<reason>``)."""
_HEADERS = {b"x-cache": "cache", b"x-cache-tier": "tier", b"x-cache-key": "key",
            b"x-cache-reason": "reason"}


def _path(scope: Scope) -> str:
    """The path as the client sent it, without the query string, safe on one log line."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else scope.get("path", "")
    path = path.split("?", 1)[0]  # some servers include the query in raw_path
    plain = path.isascii() and path.isprintable() and " " not in path
    safe = path if plain else quote(path, safe=_SAFE_PATH, encoding="latin-1")
    return safe if len(safe) <= PATH_SHOWN else safe[:PATH_SHOWN] + "…"


def _log_to_stderr() -> None:
    log.addHandler(stderr_handler())
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
