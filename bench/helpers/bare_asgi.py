"""The Python limit for HTTP hits: an ASGI app that only returns one file's bytes from memory.

Run by uvicorn with the same workers as ``voxcache serve``: whatever voxcache adds on
top of this (routing, the tenant check, key computation, headers) is its own cost;
what this app itself costs is the price of answering from Python at all.
"""

from __future__ import annotations

import os
from typing import Any

BODY = open(os.environ["VOXCACHE_BENCH_FILE"], "rb").read()  # noqa: SIM115 (read once at import)
HEADERS = [(b"content-type", b"audio/wav"), (b"content-length", str(len(BODY)).encode())]
SPLIT = int(os.environ.get("VOXCACHE_BENCH_SPLIT", "0"))
"""Send the first SPLIT bytes as a body message of their own (as voxcache sends a take's WAV
header before its stored samples): what one more write per response costs."""


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer every HTTP request with the file (draining a POST body first)."""
    if scope["type"] != "http":
        return
    more = scope["method"] == "POST"
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    if SPLIT:
        await send({"type": "http.response.body", "body": BODY[:SPLIT], "more_body": True})
        await send({"type": "http.response.body", "body": memoryview(BODY)[SPLIT:]})
        return
    await send({"type": "http.response.body", "body": BODY})
