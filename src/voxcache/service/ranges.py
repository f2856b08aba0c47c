"""HTTP Range requests over bytes already verified (RFC 9110 §14).

A Range response is cut from the verified entry in memory, never re-read from
the file: a file changed or replaced after it was verified (a symlink to
``/etc/passwd`` planted at its path, say) must not leak out as a ``206``.
Only single ranges are served; a request for several gets the whole
representation, which RFC 9110 allows ("a server MAY ignore the Range header").
"""

from __future__ import annotations

import re

_SINGLE = re.compile(r"bytes=(\d*)-(\d*)")


class RangeNotSatisfiable(Exception):
    """The one range asked for lies wholly outside the representation (416)."""


def byte_range(header: str | None, size: int, if_range: str | None,
               etag: str) -> tuple[int, int] | None:
    """The inclusive (first, last) byte to send, or None for the whole body.

    ``If-Range`` that does not name this strong ETag (a date included: there is no
    Last-Modified to compare it with) means "send it all". Malformed or multi-range
    headers are ignored, as RFC 9110 says unknown range forms must be.
    """
    if header is None or (if_range is not None and if_range.strip() != f'"{etag}"'):
        return None
    match = _SINGLE.fullmatch(header.strip().replace(" ", ""))
    if match is None or size <= 0:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # a suffix: the last N bytes
        length = int(last)
        if length == 0:
            raise RangeNotSatisfiable
        return max(0, size - length), size - 1
    start = int(first)
    if last and int(last) < start:
        return None  # invalid: ignore it
    if start >= size:
        raise RangeNotSatisfiable
    return start, size - 1 if not last else min(int(last), size - 1)
