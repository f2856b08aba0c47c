"""uvicorn's HTTP protocol with a header deadline, and the uvicorn options voxcache ships.

uvicorn closes an idle keep-alive connection only after a first request and restarts its
timer on every byte, so a silent or slowloris connection held a socket forever.
``HeaderTimeoutProtocol`` gives every request's headers a deadline (from the connection's
start or the previous response; trickled bytes do not move it) and caps their size; the
body has its own (``guard.BodyLimit``). ``uvicorn_options`` is the one place the server's
uvicorn settings are made (``serve``, ``--workers``, the test servers).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from .options import ServiceOptions

MAX_HEADER_BYTES = 64 * 1024
"""Request line plus headers: more is refused with 431 (nginx allows 32 KB, Node 16 KB).
Without a cap a client could fill memory within the header deadline."""


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline and a size cap on request headers."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *,
                 header_timeout: float) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout = header_timeout
        self._header_deadline: asyncio.TimerHandle | None = None
        """Armed while the connection owes us a request's headers."""
        self._header_bytes = 0
        self._request_begun = False
        self._refused = False

    # uvicorn hands this protocol a Transport; the base class names any BaseTransport
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_awaiting_headers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: the rest is not parsed
        awaiting = self._header_deadline is not None
        super().data_received(data)
        if awaiting and self._header_deadline is not None and not self.transport.is_closing():
            # The headers are still incomplete after these bytes, so all of them were header
            # bytes (counting after parsing never mistakes a body for headers).
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse(431, f"request headers are over {MAX_HEADER_BYTES} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True

    def on_headers_complete(self) -> None:
        self._stop_awaiting_headers()
        self._request_begun = False
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # the next request's headers are already in
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._await_headers()

    def _await_headers(self) -> None:
        self._stop_awaiting_headers()
        self._header_bytes = 0
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _stop_awaiting_headers(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        """Close the connection: 408 when a request had begun, silently when it was idle
        (a client that sent nothing is owed no answer, and may be racing a new request)."""
        self._header_deadline = None
        if self.transport.is_closing():
            return
        if self._request_begun:
            self._refuse(408, f"request headers did not arrive within {self.header_timeout:g} s")
        else:
            self.transport.close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that never reached the app, then close (the parser is in the
        middle of its headers, so the connection cannot carry another request)."""
        self._stop_awaiting_headers()
        self._refused = True
        body = message.encode()
        headers = (b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
                   b"content-length: %d\r\n\r\n" % len(body))
        self.transport.write(STATUS_LINE[status] + headers + body)
        self.transport.close()


@dataclass(frozen=True, slots=True)
class HeaderTimeout:
    """Makes ``HeaderTimeoutProtocol``s with one deadline; uvicorn takes it as its ``http``
    class. A plain, picklable object: ``--workers`` sends uvicorn's config to each worker."""

    seconds: float

    def __call__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> HeaderTimeoutProtocol:
        return HeaderTimeoutProtocol(config, server_state, app_state, _loop,
                                     header_timeout=self.seconds)


def uvicorn_options(options: ServiceOptions) -> dict[str, Any]:
    """The uvicorn settings of a voxcache server (beside host, port and workers)."""
    return {"http": HeaderTimeout(options.header_timeout), "log_level": "warning"}
