"""An edge's client for its center voxcache: three calls, and nothing it sends is trusted.

- ``identity()``: ``GET /v1/packs/identity`` — the center's engine identity and the
  tenant the edge's API key belongs to there.
- ``stored(key)``: ``GET /v1/audio/{key}`` — the center's stored take, verified here
  (``entry.decode`` with the key that was asked for: a body that is not that key's
  entry, byte for byte, is an error and nothing of it is kept). At most
  ``MAX_ENTRY_BYTES`` are read.
- ``render(body, key)``: ``POST /v1/synthesize`` — the center renders and stores the
  take; its ``X-Cache-Key`` must be the key the edge computed (else the two key the
  request differently and nothing may be stored). The audio is then fetched by key,
  so what the edge stores is always a verified envelope, never bare samples.

Failures are sorted by what the edge should do about them: ``Unreachable`` (no
connection could be made, or it was dropped before an answer: the edge goes
offline for a while), ``CenterBusy`` (the center answered 503: pass its Retry-After
on) and ``UpstreamError`` for everything else (the center answered, wrongly).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from ..entry import CorruptEntry, Entry, decode
from ..errors import Overloaded, UpstreamError
from ..tiers.entry_files import MAX_ENTRY_BYTES
from .http import error_message

MAX_ERROR_BYTES = 64 * 1024


class Unreachable(Exception):
    """No answer from the center: refused, timed out connecting, or dropped before a reply."""


class CenterBusy(Overloaded):
    """The center answered 503 (overloaded, or shutting down): try again after its hint."""


class CenterClient:
    """A thread-safe client for one center (httpx, keep-alive)."""

    def __init__(self, url: str, headers: dict[str, str], *, timeout: float,
                 connect_timeout: float, retries: int) -> None:
        import httpx

        self.url = url
        self.retries = retries
        self._client = httpx.Client(
            base_url=url, headers=headers, follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=connect_timeout))

    def identity(self) -> dict[str, Any]:
        """The center's identity document and the edge's tenant there."""
        with self._send("GET", "/v1/packs/identity") as response:
            body = self._body(response, MAX_ERROR_BYTES)
            self._refuse_failure(response, body, "GET /v1/packs/identity")
        try:
            doc = json.loads(body)
        except ValueError:
            raise UpstreamError(f"the center at {self.url} did not answer its identity as "
                                "JSON; is it a voxcache with packs (0.1+)?") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("identity"), dict):
            raise UpstreamError(f"the center at {self.url} answered an identity without "
                                "'identity'")
        return doc

    def stored(self, key: str) -> Entry | None:
        """The center's take for ``key``, verified; None when it holds none."""
        with self._send("GET", f"/v1/audio/{key}") as response:
            if response.status_code == 404:
                return None
            body = self._body(response, MAX_ENTRY_BYTES)
            self._refuse_failure(response, body, "GET /v1/audio/{key}")
        try:
            entry = decode(body, key)
        except CorruptEntry as exc:
            raise UpstreamError(f"the center's take for {key[:12]} does not verify ({exc}); "
                                "nothing was stored") from None
        if entry.header.kind != "audio":
            raise UpstreamError(f"the center answered {key[:12]} with a {entry.header.kind!r} "
                                "entry, not audio; nothing was stored")
        return entry

    def render(self, body: dict[str, Any], key: str) -> str:
        """Have the center render (and store) the take; return its ``X-Cache`` status."""
        with self._send("POST", "/v1/synthesize", json=body) as response:
            if response.status_code != 200:
                self._refuse_failure(response, self._body(response, MAX_ERROR_BYTES),
                                     "POST /v1/synthesize")
            # The samples are fetched by key next (verified); this body is not read.
            their_key = response.headers.get("x-cache-key", "")
            status = response.headers.get("x-cache", "")
        if their_key != key:
            raise KeyMismatch(key, their_key)
        return status

    @contextlib.contextmanager
    def _send(self, method: str, path: str, **kwargs: Any) -> Iterator[Any]:
        """One request. Retried while no connection could be made, and — for a GET, which
        changes nothing — when the connection dropped before an answer (a keep-alive
        connection the center closed); a POST that may have reached the center is not sent
        twice (it would render twice)."""
        import httpx

        request = self._client.build_request(method, path, **kwargs)
        retried: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.ConnectTimeout)
        if method == "GET":
            retried += (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
        for attempt in range(self.retries + 1):
            try:
                response = self._client.send(request, stream=True)
                break
            except retried as exc:
                if attempt >= self.retries:
                    raise Unreachable(f"{type(exc).__name__}: {exc}") from None
                time.sleep(0.1 * (attempt + 1))
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                raise Unreachable(f"{type(exc).__name__}: {exc}") from None
            except httpx.TimeoutException as exc:
                raise UpstreamError(f"the center at {self.url} did not answer {method} {path} "
                                    f"in time ({type(exc).__name__})") from None
            except httpx.HTTPError as exc:
                raise UpstreamError(f"the center at {self.url} failed {method} {path}: "
                                    f"{type(exc).__name__}: {exc}") from None
        try:
            yield response
        finally:
            response.close()

    def _body(self, response: Any, limit: int) -> bytes:
        """The body, refusing one over ``limit`` bytes (a center answering garbage)."""
        import httpx

        parts, size = [], 0
        try:
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    raise UpstreamError(f"the center at {self.url} sent more than {limit} "
                                        "bytes; nothing was stored")
                parts.append(chunk)
        except httpx.HTTPError as exc:
            raise Unreachable(f"cut off mid-answer: {type(exc).__name__}: {exc}") from None
        return b"".join(parts)

    def _refuse_failure(self, response: Any, body: bytes, what: str) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        message = error_message(body)
        if status == 503:
            raise CenterBusy(f"the center is unavailable ({message})",
                             retry_after=_retry_after(response.headers.get("retry-after")))
        hint = ("; give the edge an API key of one of the center's tenants (upstream option "
                "api_key)" if status in (401, 403) else "")
        raise UpstreamError(f"the center answered {what} with {status}: {message}{hint}",
                            upstream_status=status)

    def close(self) -> None:
        """Close pooled connections."""
        self._client.close()


class KeyMismatch(UpstreamError):
    """The center keyed a request differently from the edge (another tenant, another model)."""

    def __init__(self, ours: str, theirs: str) -> None:
        super().__init__(
            f"the center keyed this request as {theirs[:12] or 'nothing'}, the edge as "
            f"{ours[:12]}: they resolve it differently (another tenant for the edge's API key, "
            "or the center's engine changed); nothing was stored")
        self.theirs = theirs


def _retry_after(value: str | None) -> float:
    try:
        return max(1.0, float(value or 1))
    except ValueError:
        return 1.0
