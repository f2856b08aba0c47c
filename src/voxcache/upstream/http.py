"""Talking to an upstream TTS server: one client, one retry rule, one error type.

Retries cover only failures where the request provably never reached the
upstream (it refused or timed out the connection). An upstream that answered —
even with 500 — is never asked again: the answer is the upstream's verdict, a
second render would only double its load, and a request that timed out while
reading may still be rendering there. Every failure becomes an
:class:`~voxcache.errors.UpstreamError` carrying the upstream's status and its
own message, so the caller sees *why* (502 over HTTP) instead of a traceback.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

from ..errors import MissingDependency, UpstreamError
from ..redact import redact
from .health import PROBE_SECONDS, Reachability
from .transport import (
    DEFAULT_MAX_ANSWER_BYTES,
    MAX_ERROR_BYTES,
    ShuttingDown,
    check_length,
    chunks,
    deadline_after,
    http_client,
    limited,
    read_limited,
    within,
)

log = logging.getLogger("voxcache.upstream")

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 300.0
"""Seconds an upstream's whole answer may take: long texts on a busy GPU take minutes."""
DEFAULT_RETRIES = 2
MAX_ERROR_CHARS = 500
_HTML = re.compile(r"\s*<(?:!doctype|html|head|body|title)\b", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingDependency(
            "the caching gateway needs httpx: pip install 'voxcache[service]'"
        ) from None
    return httpx


class UpstreamClient:
    """A thread-safe HTTP client bound to one upstream base URL.

    ``timeout`` bounds a whole answer — connecting, sending, the headers and the last byte
    of the body (``transport``) — not each read; ``max_answer_bytes`` bounds its size.
    """

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_READ_TIMEOUT,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 retries: int = DEFAULT_RETRIES, backoff: float = 0.2,
                 headers: dict[str, str] | None = None,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
                 health: Reachability | None = None) -> None:
        _httpx()
        self.base_url = base_url.rstrip("/")
        self.health = health or Reachability("upstream", "", self.base_url)
        """What the last call (or probe) found: reachable or not, since when, last error."""
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_answer_bytes = max_answer_bytes
        self._client, self.backend = http_client(self.base_url, timeout=timeout,
                                                 connect_timeout=connect_timeout,
                                                 headers=headers)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request and return the whole response; raise UpstreamError unless 2xx."""
        response = self.exchange(method, path, **kwargs)
        self._check(response, method)
        return response

    def exchange(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request and return the whole response whatever its status: a route that
        proxies an upstream's own endpoint passes its answer on, refusals included.
        Unreachable, or cut off before an answer: UpstreamError, as for every request."""
        deadline = deadline_after(self.timeout)
        response = self._send(method, path, deadline, **kwargs)
        try:
            body = self._read(response, deadline, self.max_answer_bytes)
        finally:
            response.close()
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length",
                                        "transfer-encoding")]
        return _httpx().Response(response.status_code, headers=headers, content=body,
                                 request=response.request)

    @contextlib.contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[Iterator[bytes]]:
        """Send one request and yield its body as it arrives (misses stream to callers early).

        A failure mid-body is an UpstreamError too; the caller never stores a torn take,
        because the render fails as a whole.
        """
        deadline = deadline_after(self.timeout)
        response = self._send(method, path, deadline, **kwargs)
        try:
            if not 200 <= response.status_code < 300:
                error = self._read(response, deadline, MAX_ERROR_BYTES, truncate=True)
                self._check(response, method, error)
            check_length(response, self.max_answer_bytes, f"upstream {response.url}")
            yield self._body(response, deadline)
        finally:
            response.close()

    def _send(self, method: str, path: str, deadline: float, **kwargs: Any) -> Any:
        """Send, retrying only when the connection itself failed (nothing reached the server)."""
        httpx = _httpx()
        url = self.base_url + path
        request = self._client.build_request(method, url, **kwargs)
        attempt = 0
        while True:
            try:
                with within(deadline):
                    response = self._client.send(request, stream=True)
                self.health.answered()
                return response
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.retries or self.backend.stopped or \
                        time.monotonic() >= deadline:
                    raise self._unreachable(exc, attempt) from None
                attempt += 1
                log.warning("upstream %s: %s; retry %d of %d", url, exc, attempt, self.retries)
                time.sleep(self.backoff * 2 ** (attempt - 1))
            except httpx.HTTPError as exc:
                raise self._failure(url, exc) from None

    def _unreachable(self, exc: Exception, attempt: int) -> Exception:
        if self.backend.stopped:
            return _stopping(self.base_url)
        error = UpstreamError(
            f"upstream {self.base_url} is unreachable ({type(exc).__name__}: {exc}) "
            f"after {attempt + 1} attempt(s); is the TTS server running?")
        self.health.unreachable(str(error))
        return error

    def _check(self, response: Any, method: str, body: bytes | None = None) -> None:
        if not 200 <= response.status_code < 300:
            content = response.content if body is None else body
            error = UpstreamError(
                f"upstream {method} {response.url} answered {response.status_code}: "
                f"{error_message(content)}",
                upstream_status=response.status_code,
                upstream_reply=error_fields(content),
            )
            if response.status_code >= 500:
                self.health.failed(str(error))
            raise error

    def _read(self, response: Any, deadline: float, limit: int, truncate: bool = False
              ) -> bytes:
        httpx = _httpx()
        what = f"upstream {response.url}"
        try:
            if not truncate:
                check_length(response, limit, what)
            return read_limited(response, deadline, limit, what, truncate=truncate)
        except httpx.HTTPError as exc:
            raise self._failure(str(response.url), exc) from None
        except UpstreamError as exc:  # too large
            self.health.failed(str(exc))
            raise

    def _body(self, response: Any, deadline: float) -> Iterator[bytes]:
        httpx = _httpx()
        try:
            yield from limited(chunks(response, deadline), self.max_answer_bytes,
                               f"upstream {response.url}")
        except httpx.HTTPError as exc:
            raise self._failure(str(response.url), exc) from None
        except UpstreamError as exc:  # too large
            self.health.failed(str(exc))
            raise

    def _failure(self, url: str, exc: Exception) -> Exception:
        """An upstream that was reached but failed mid-way (timeouts included): never
        retried. Past the answer's deadline, or cut off because the service stops, it
        says so."""
        if self.backend.stopped:
            return _stopping(self.base_url)
        if isinstance(exc, _httpx().TimeoutException):
            error = UpstreamError(
                f"upstream {url} did not finish its answer within {self.timeout:g} s "
                f"({type(exc).__name__}); nothing was stored. Raise upstream_timeout for "
                "long texts")
        else:
            error = UpstreamError(f"upstream {url} failed: {type(exc).__name__}: {exc}")
        self.health.failed(str(error))
        return error

    def probe(self, path: str) -> None:
        """Ask ``path`` once, briefly, to learn whether the upstream answers at all (any
        status will do); the answer goes to ``health``, never to a caller."""
        httpx = _httpx()
        if self.backend.stopped:
            return
        try:
            with within(deadline_after(PROBE_SECONDS)):
                self._client.send(self._client.build_request("GET", self.base_url + path),
                                  stream=True).close()
        except httpx.TimeoutException:
            self.health.unreachable(f"upstream {self.base_url} did not answer GET {path} "
                                    f"within {PROBE_SECONDS:g} s")
        except httpx.HTTPError as exc:
            self.health.unreachable(f"upstream {self.base_url} is unreachable "
                                    f"({type(exc).__name__}: {exc})")
        else:
            self.health.answered()

    def stop(self, grace: float) -> None:
        """Cut off every call still running ``grace`` seconds from now (the service stops)."""
        self.backend.stop(grace)

    def get_json(self, path: str, **kwargs: Any) -> Any:
        """GET a JSON document (discovery endpoints); malformed JSON is an UpstreamError."""
        response = self.request("GET", path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(
                f"upstream {self.base_url}{path} did not answer JSON: "
                f"{error_message(response.content)}"
            ) from None


def _stopping(url: str) -> ShuttingDown:
    return ShuttingDown(f"this server is shutting down and stopped waiting for the upstream "
                        f"{url}; send the request again", retry_after=1)


def error_message(body: bytes) -> str:
    """Pull the human-readable part out of an upstream's error body, fit for a client.

    Upstreams disagree on the shape: GPT-SoVITS sends ``{"message", "Exception"}``,
    OpenAI-style servers ``{"error": {"message"}}``, FastAPI ``{"detail"}``, Flask an
    HTML page (its title is the message). Unknown shapes are passed on verbatim. Whatever
    the shape, tracebacks, absolute paths and object addresses are scrubbed (GPT-SoVITS'
    ``Exception`` carries its install folder) and the text is truncated.
    """
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return _truncate(_html_text(text)) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return _truncate(str(error["message"]))
        parts = [str(data[k]) for k in ("message", "Exception", "detail") if data.get(k)]
        if parts:
            return _truncate(": ".join(parts))
    return _truncate(text)


def error_fields(body: bytes) -> dict[str, str]:
    """The top-level string fields of a JSON error body, each scrubbed like
    ``error_message`` ({} for any other shape)."""
    try:
        data = json.loads(body.decode("utf-8", errors="replace"))
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): _truncate(v) for k, v in data.items() if isinstance(v, str)}


def _html_text(text: str) -> str:
    """An HTML error page's title (or, without one, its text): the page's markup and
    scripts say nothing to an API client."""
    if not _HTML.match(text):
        return text
    title = _TITLE.search(text)
    if title is not None:
        return html.unescape(title.group(1))
    return html.unescape(_TAG.sub(" ", _SCRIPT.sub(" ", text)))


def _truncate(text: str) -> str:
    text = redact(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"
