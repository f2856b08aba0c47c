"""An edge's client for its center voxcache: three calls, and nothing it sends is trusted.

``identity()`` (``GET /v1/packs/identity``), ``stored(key)`` (``GET /v1/audio/{key}``,
verified as that key's entry byte for byte, bounded in size and time) and ``render(body,
key)`` (``POST /v1/synthesize``, whose ``X-Cache-Key`` must be the edge's key; the audio is
then fetched by key). Failures say what to do: ``Unreachable`` (go offline a while),
``CenterBusy`` (pass Retry-After on), ``UpstreamError`` (answered wrongly).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..entry import CorruptEntry, Entry, decode
from ..errors import Overloaded, UpstreamError
from .health import PROBE_SECONDS, Reachability
from .http import error_message
from .transport import (
    DEFAULT_MAX_ANSWER_BYTES,
    MAX_ERROR_BYTES,
    ShuttingDown,
    check_length,
    deadline_after,
    http_client,
    read_limited,
    within,
)

IDENTITY_BYTES = 2**20
"""Largest identity answer read (a few KB: the engine's parameters, voices and aliases)."""


@dataclass(frozen=True, slots=True)
class _Answer:
    """A response whose body is still to be read, and the deadline of the whole answer."""

    response: Any
    deadline: float
    what: str
    """The call, for messages (``GET /v1/audio/3fa4b2c1d0e9…``)."""


class Unreachable(Exception):
    """No answer from the center: refused, timed out connecting, or dropped before a reply."""


class CenterBusy(Overloaded):
    """The center answered 503 (overloaded, or shutting down): try again after its hint."""


class CenterClient:
    """A thread-safe client for one center (httpx, keep-alive)."""

    def __init__(self, url: str, headers: dict[str, str], *, timeout: float,
                 connect_timeout: float, retries: int,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
        self.url = url
        self.retries = retries
        self.timeout = timeout
        """Seconds one whole answer may take (connect, headers, body)."""
        self.max_answer_bytes = max_answer_bytes
        self.health = Reachability("center", "voxcache", url)
        """What the last call (or probe) found: reachable or not, since when, last error."""
        self._client, self.backend = http_client(url, timeout=timeout,
                                                 connect_timeout=connect_timeout,
                                                 headers=headers)

    def identity(self) -> dict[str, Any]:
        """The center's identity document and the edge's tenant there."""
        with self._send("GET", "/v1/packs/identity") as answer:
            body = self._body(answer, IDENTITY_BYTES)
            self._refuse_failure(answer.response, body, "GET /v1/packs/identity")
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
        with self._send("GET", f"/v1/audio/{key}", what=f"GET /v1/audio/{key[:12]}…") as answer:
            response = answer.response
            if response.status_code == 404:
                return None
            if 200 <= response.status_code < 300:
                check_length(response, self.max_answer_bytes, f"the center at {self.url}")
            body = self._body(answer, self.max_answer_bytes)
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
        with self._send("POST", "/v1/synthesize", json=body) as answer:
            response = answer.response
            if response.status_code != 200:
                self._refuse_failure(response, self._body(answer, MAX_ERROR_BYTES),
                                     "POST /v1/synthesize")
            # The samples are fetched by key next (verified); this body is not read.
            their_key = response.headers.get("x-cache-key", "")
            status: str = response.headers.get("x-cache", "")
        if their_key != key:
            raise KeyMismatch(key, their_key)
        return status

    @contextlib.contextmanager
    def _send(self, method: str, path: str, what: str = "", **kwargs: Any
              ) -> Iterator[_Answer]:
        """One request, its whole answer within ``timeout``. Retried while no connection
        could be made, and — for a GET, which changes nothing — when the connection dropped
        before an answer (a keep-alive connection the center closed); a POST that may have
        reached the center is not sent twice (it would render twice)."""
        import httpx

        what = what or f"{method} {path}"
        request = self._client.build_request(method, path, **kwargs)
        retried: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.ConnectTimeout)
        if method == "GET":
            retried += (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
        deadline = deadline_after(self.timeout)
        for attempt in range(self.retries + 1):
            try:
                with within(deadline):
                    response = self._client.send(request, stream=True)
                self.health.answered()
                break
            except retried as exc:
                self._stopping()
                if attempt >= self.retries or time.monotonic() >= deadline:
                    raise self._unreachable(f"{type(exc).__name__}: {exc}") from None
                time.sleep(0.1 * (attempt + 1))
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                self._stopping()
                raise self._unreachable(f"{type(exc).__name__}: {exc}") from None
            except httpx.HTTPError as exc:
                raise self._failure(what, exc) from None
        try:
            yield _Answer(response, deadline, what)
        finally:
            response.close()

    def _body(self, answer: _Answer, limit: int) -> bytes:
        """The body within the answer's deadline, refusing one over ``limit`` bytes (a
        center answering garbage; an error answer is cut to its first ``limit`` bytes)."""
        import httpx

        response = answer.response
        truncate = not 200 <= response.status_code < 300
        try:
            return read_limited(response, answer.deadline, limit, f"the center at {self.url}",
                                truncate=truncate)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            self._stopping()
            raise self._unreachable(f"cut off mid-answer: {type(exc).__name__}: {exc}"
                                    ) from None
        except httpx.HTTPError as exc:
            raise self._failure(answer.what, exc) from None
        except UpstreamError as exc:  # too large
            self.health.failed(str(exc))
            raise

    def _unreachable(self, why: str) -> Unreachable:
        self.health.unreachable(f"the center at {self.url} is unreachable: {why}")
        return Unreachable(why)

    def _failure(self, what: str, exc: Exception) -> Exception:
        """A center that answered, but not well: too slowly (the whole answer's deadline), or
        not over HTTP; or the service is stopping."""
        import httpx

        self._stopping()
        if isinstance(exc, httpx.TimeoutException):
            error = UpstreamError(f"the center at {self.url} did not finish answering {what} "
                                  f"within {self.timeout:g} s ({type(exc).__name__}); nothing "
                                  "was stored")
        else:
            error = UpstreamError(f"the center at {self.url} failed {what}: "
                                  f"{type(exc).__name__}: {exc}")
        self.health.failed(str(error))
        return error

    def probe(self, path: str) -> None:
        """Ask ``path`` once, briefly, to learn whether the center answers at all."""
        import httpx

        if self.backend.stopped:
            return
        try:
            with within(deadline_after(PROBE_SECONDS)):
                self._client.send(self._client.build_request("GET", path), stream=True).close()
        except httpx.TimeoutException:
            self.health.unreachable(f"the center at {self.url} did not answer GET {path} "
                                    f"within {PROBE_SECONDS:g} s")
        except httpx.HTTPError as exc:
            self.health.unreachable(f"the center at {self.url} is unreachable "
                                    f"({type(exc).__name__}: {exc})")
        else:
            self.health.answered()

    def _stopping(self) -> None:
        """Raise ShuttingDown when the call failed because the service stopped waiting."""
        if self.backend.stopped:
            raise ShuttingDown(f"this edge is shutting down and stopped waiting for the "
                               f"center at {self.url}; send the request again", retry_after=1)

    def stop(self, grace: float) -> None:
        """Cut off every call still running ``grace`` seconds from now (the service stops)."""
        self.backend.stop(grace)

    def _refuse_failure(self, response: Any, body: bytes, what: str) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        message = error_message(body)
        if status >= 500:
            self.health.failed(f"the center answered {what} with {status}: {message}")
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
