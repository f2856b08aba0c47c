"""How every upstream answer is read: a deadline for the whole answer, a size limit, a stop.

httpx's timeouts are per socket operation, so a server trickling a byte every two seconds
held a render slot forever. Here every connect, read and write is capped by what is left
of the answer's deadline (``DeadlineBackend``); ``stop(grace)`` ends every call on SIGTERM;
``read_limited`` refuses a declared length over the limit before reading and stops at the
limit. docs/operating/gateway.md, "Slow, huge and hung upstreams".
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import MissingDependency, Overloaded, UpstreamError

try:
    import httpcore
    import httpx
except ImportError:  # pragma: no cover - the [service] extra brings both
    raise MissingDependency(
        "the caching gateway needs httpx: pip install 'voxcache[service]'") from None

DEFAULT_MAX_ANSWER_BYTES = 128 * 2**20
"""Largest upstream answer read (option ``max_answer_bytes``). A take of 5,000 characters
(``max_text_chars``) is about 6 minutes: 34 MB of 16-bit PCM at 48 kHz."""
MAX_ERROR_BYTES = 64 * 1024
"""An error answer is read this far, for its message."""

_local = threading.local()


class ShuttingDown(Overloaded):
    """The service is stopping and stopped waiting for its upstream (503: retry)."""


class AnswerTooLarge(UpstreamError):
    """An answer declared or sent more bytes than may be held."""

    release_memory = True
    """The render may have held up to the limit: once it has ended, the admission gives
    the freed memory back to the system (``scheduling.release_memory``)."""


def deadline_after(seconds: float) -> float:
    """The monotonic time ``seconds`` from now."""
    return time.monotonic() + seconds


@contextlib.contextmanager
def within(deadline: float) -> Iterator[None]:
    """Bound every upstream socket operation of this thread to ``deadline`` (monotonic)."""
    outer = getattr(_local, "deadline", math.inf)
    _local.deadline = min(outer, deadline)
    try:
        yield
    finally:
        _local.deadline = outer


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each operation capped at the time its answer has left."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._streams: weakref.WeakSet[DeadlineStream] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.cutoff = math.inf
        """Monotonic time after which nothing is waited for (set by ``stop``)."""

    def left(self, timeout: float | None, failure: type[Exception]) -> float | None:
        """``timeout`` capped at what the answer (and the service) has left; ``failure``
        raised when nothing is left."""
        end = min(getattr(_local, "deadline", math.inf), self.cutoff)
        if end == math.inf:
            return timeout
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise failure("the answer's deadline has passed")
        return remaining if timeout is None else min(timeout, remaining)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        timeout = self.left(timeout, httpcore.ConnectTimeout)
        return self._track(self._inner.connect_tcp(host, port, timeout, local_address,
                                                   socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:
        timeout = self.left(timeout, httpcore.ConnectTimeout)
        return self._track(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def _track(self, inner: httpcore.NetworkStream) -> DeadlineStream:
        stream = DeadlineStream(inner, self)
        with self._lock:
            self._streams.add(stream)
        return stream

    def stop(self, grace: float) -> None:
        """Let calls in flight go on for ``grace`` seconds at most, then cut them off."""
        self.cutoff = min(self.cutoff, time.monotonic() + grace)
        if grace <= 0:
            self.abort()
            return
        timer = threading.Timer(grace, self.abort)
        timer.daemon = True
        timer.start()

    @property
    def stopped(self) -> bool:
        """True once the cutoff has passed: a failed call failed because of it."""
        return time.monotonic() >= self.cutoff

    def abort(self) -> None:
        """Shut every socket: a read blocked in ``recv`` returns at once."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.abort()


class DeadlineStream(httpcore.NetworkStream):
    """One connection's stream, its operations bounded by ``DeadlineBackend.left``."""

    def __init__(self, inner: httpcore.NetworkStream, backend: DeadlineBackend) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._backend.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for start in range(0, len(view), 65536):  # the deadline is checked between pieces
            self._inner.write(bytes(view[start:start + 65536]),
                              self._backend.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        timeout = self._backend.left(timeout, httpcore.ConnectTimeout)
        return self._backend._track(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def abort(self) -> None:
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Transport(httpx.HTTPTransport):
    """httpx's transport over a ``DeadlineBackend`` (httpx builds its pool without a way to
    name the backend, so the pool is built again with it)."""

    def __init__(self, backend: DeadlineBackend) -> None:
        super().__init__()
        limits = httpx.Limits()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, network_backend=backend)


def http_client(base_url: str, *, timeout: float, connect_timeout: float,
                headers: dict[str, str] | None = None) -> tuple[httpx.Client, DeadlineBackend]:
    """A thread-safe httpx client for one upstream, and the backend that bounds its calls.
    Calls go straight to the upstream (``HTTP_PROXY`` and the like are not used)."""
    backend = DeadlineBackend()
    client = httpx.Client(base_url=base_url, headers=headers or {}, follow_redirects=False,
                          timeout=httpx.Timeout(timeout, connect=connect_timeout),
                          transport=_Transport(backend))
    return client, backend


def chunks(response: httpx.Response, deadline: float) -> Iterator[bytes]:
    """The body as it arrives, each read within ``deadline``."""
    parts = response.iter_bytes()
    while True:
        with within(deadline):
            try:
                chunk = next(parts)
            except StopIteration:
                return
        yield chunk


def check_length(response: httpx.Response, limit: int, what: str) -> None:
    """Refuse an answer whose declared length is over ``limit`` before reading any of it."""
    declared = response.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limit and \
            "content-encoding" not in response.headers:
        raise AnswerTooLarge(f"{what} announced {int(declared)} bytes, over the {limit} an "
                             "answer may have (upstream option max_answer_bytes); nothing was "
                             "read or stored")


def limited(parts: Iterable[bytes], limit: int, what: str) -> Iterator[bytes]:
    """``parts``, refusing the answer once more than ``limit`` bytes came."""
    size = 0
    for part in parts:
        size += len(part)
        if size > limit:
            raise AnswerTooLarge(f"{what} sent more than {limit} bytes, the most an answer may "
                                 "have (upstream option max_answer_bytes); nothing was stored")
        yield part


def read_limited(response: httpx.Response, deadline: float, limit: int, what: str,
                 *, truncate: bool = False) -> bytes:
    """The whole body within ``deadline`` and ``limit`` (``truncate``: the first ``limit``
    bytes, for an error's message, instead of a refusal)."""
    body = bytearray()
    for part in chunks(response, deadline):
        body += part
        if len(body) > limit:
            if truncate:
                return bytes(body[:limit])
            del body
            raise AnswerTooLarge(f"{what} sent more than {limit} bytes, the most an answer "
                                 "may have (upstream option max_answer_bytes); nothing was "
                                 "stored")
    return bytes(body)
