"""Local faults, counted every time and logged once per cause.

A read-only folder, a full disk or a locked index fails every request the same
way; logging each one would bury the log (and slow the requests), logging none
would hide the fault. Each (area, cause) pair is logged once per process at
WARNING, and every occurrence is counted as ``<area>_errors`` in the persisted
counters (``voxcache stats``, ``/metrics``).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable


class FaultLog:
    """Counts local faults and logs the first of each cause."""

    def __init__(self, log: logging.Logger, count: Callable[[str, int], None]) -> None:
        self._log = log
        self._count = count
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def report(self, area: str, exc: BaseException, consequence: str) -> None:
        """Count a fault in ``area`` and log it if its cause is new."""
        self._count(f"{area.replace(' ', '_')}_errors", 1)
        cause = _cause(exc)
        with self._lock:
            if (area, cause) in self._seen:
                return
            self._seen.add((area, cause))
        self._log.warning("%s (%s: %s); logged once per cause", consequence, area, cause)


def _cause(exc: BaseException) -> str:
    """A short, stable name for what went wrong (the errno name, or the message)."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code in errno.errorcode:
        return f"{errno.errorcode[code]} {exc.__class__.__name__}"
    return f"{exc.__class__.__name__}: {str(exc)[:120]}"
