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

log = logging.getLogger("voxcache.upstream")

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 300.0
"""Seconds to wait for an upstream's answer: long texts on a busy GPU take minutes."""
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
    """A thread-safe HTTP client bound to one upstream base URL."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_READ_TIMEOUT,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 retries: int = DEFAULT_RETRIES, backoff: float = 0.2,
                 headers: dict[str, str] | None = None) -> None:
        httpx = _httpx()
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers=headers or {}, follow_redirects=False)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request and return the whole response; raise UpstreamError unless 2xx."""
        response = self._send(method, path, stream=False, **kwargs)
        self._check(response, method)
        return response

    def exchange(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request and return the whole response whatever its status: a route that
        proxies an upstream's own endpoint passes its answer on, refusals included.
        Unreachable, or cut off before an answer: UpstreamError, as for every request."""
        return self._send(method, path, stream=False, **kwargs)

    @contextlib.contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[Iterator[bytes]]:
        """Send one request and yield its body as it arrives (misses stream to callers early).

        A failure mid-body is an UpstreamError too; the caller never stores a torn take,
        because the render fails as a whole.
        """
        response = self._send(method, path, stream=True, **kwargs)
        try:
            if not 200 <= response.status_code < 300:
                self._read(response)  # the error text, for the message
            self._check(response, method)
            yield self._body(response)
        finally:
            response.close()

    def _send(self, method: str, path: str, *, stream: bool, **kwargs: Any) -> Any:
        """Send, retrying only when the connection itself failed (nothing reached the server)."""
        httpx = _httpx()
        url = self.base_url + path
        request = self._client.build_request(method, url, **kwargs)
        attempt = 0
        while True:
            try:
                return self._client.send(request, stream=stream)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.retries:
                    raise UpstreamError(
                        f"upstream {self.base_url} is unreachable ({type(exc).__name__}: {exc}) "
                        f"after {attempt + 1} attempt(s); is the TTS server running?"
                    ) from None
                attempt += 1
                log.warning("upstream %s: %s; retry %d of %d", url, exc, attempt, self.retries)
                time.sleep(self.backoff * 2 ** (attempt - 1))
            except httpx.HTTPError as exc:
                raise _failure(url, exc) from None

    def _check(self, response: Any, method: str) -> None:
        if not 200 <= response.status_code < 300:
            raise UpstreamError(
                f"upstream {method} {response.url} answered {response.status_code}: "
                f"{error_message(response.content)}",
                upstream_status=response.status_code,
                upstream_reply=error_fields(response.content),
            )

    def _read(self, response: Any) -> None:
        httpx = _httpx()
        try:
            response.read()
        except httpx.HTTPError as exc:
            raise _failure(str(response.url), exc) from None

    def _body(self, response: Any) -> Iterator[bytes]:
        httpx = _httpx()
        try:
            yield from response.iter_bytes()
        except httpx.HTTPError as exc:
            raise _failure(str(response.url), exc) from None

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


def _failure(url: str, exc: Exception) -> UpstreamError:
    """An upstream that was reached but failed mid-way (timeouts included): never retried."""
    if isinstance(exc, _httpx().TimeoutException):
        return UpstreamError(f"upstream {url} did not answer in time ({type(exc).__name__}); "
                             "raise the gateway's timeout for long texts")
    return UpstreamError(f"upstream {url} failed: {type(exc).__name__}: {exc}")


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
