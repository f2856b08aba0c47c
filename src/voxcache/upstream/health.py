"""Whether an upstream (or an edge's center) answers: reachable or not, since when, last error.

Hits never need the upstream, so a gateway whose upstream is down keeps answering — and
without this nothing said so: ``/readyz`` listed memory and disk, no gauge could alert.
Every call the client makes tells ``Reachability`` what it found (any HTTP answer:
reachable; refused or no answer: not), and when nothing has been asked for a while the
service's ``/readyz`` or ``/metrics`` has the client send one probe (``PROBE_AFTER``), so
the state is at most that old whether or not misses arrive.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..redact import redact

PROBE_AFTER = 5.0
"""Seconds without a call after which the state is probed again (on /readyz, /metrics)."""
PROBE_SECONDS = 2.0
"""How long a probe waits for an answer before the upstream is counted unreachable."""
MAX_ERROR_CHARS = 300


class Reachability:
    """The last word on one upstream: thread-safe, written by every call and probe."""

    def __init__(self, role: str, kind: str, url: str) -> None:
        self.role = role
        """``upstream`` (a gateway's TTS server) or ``center`` (an edge's voxcache)."""
        self.kind = kind
        self.url = without_credentials(url)
        self.up: bool | None = None
        """None until the first call or probe."""
        self.since: float | None = None
        """Wall-clock time the state last changed (or was first known)."""
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self._seen = 0.0  # monotonic time of the last call or probe
        self._lock = threading.Lock()

    def answered(self) -> None:
        """A call got an HTTP answer (any status): the upstream is reachable."""
        self._set(True)

    def unreachable(self, error: str) -> None:
        """No connection, or no answer at all."""
        self._set(False, error)

    def failed(self, error: str) -> None:
        """An answer came, but wrong (too slow, too large, cut off): still reachable."""
        self._set(True, error)

    def stale(self) -> bool:
        """True when nothing was asked for ``PROBE_AFTER`` seconds (or ever)."""
        return time.monotonic() - self._seen > PROBE_AFTER

    def _set(self, up: bool, error: str | None = None) -> None:
        with self._lock:
            self._seen = time.monotonic()
            if up != self.up:
                self.up, self.since = up, time.time()
            if error is not None:
                self.last_error = redact(error)[:MAX_ERROR_CHARS]
                self.last_error_at = time.time()

    def describe(self) -> dict[str, Any]:
        """The state for ``/readyz``: times as Unix seconds, the error scrubbed."""
        with self._lock:
            return {"kind": self.kind, "url": self.url,
                    "reachable": self.up, "since": _round(self.since),
                    "last_error": self.last_error, "last_error_at": _round(self.last_error_at)}


def without_credentials(url: str) -> str:
    """``url`` without a user or password (``/readyz`` answers anyone, labels are public)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _round(when: float | None) -> float | None:
    return None if when is None else round(when, 3)
