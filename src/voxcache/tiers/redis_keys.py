"""How the Redis tier is addressed: its URL and options, and its key names.

Key schema (the hash tag ``{<key>}`` puts every Redis key of one entry in one
cluster slot, so an entry and its lease can be used together in a script)::

    <prefix>{<key>}:entry:<kind>    the entry (inline) or a pointer to its object
    <prefix>{<key>}:lease           the render lease (see ``RedisKeys.lease``)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..errors import InvalidParameter
from .remote import redacted

DEFAULT_PREFIX = "vxc:"
DEFAULT_INLINE_LIMIT = 256 * 1024
DEFAULT_TIMEOUT = 0.5
DEFAULT_CONNECT_TIMEOUT = 0.25
DEFAULT_RETRIES = 1
SCHEMES = {"redis": ("redis", False), "rediss": ("rediss", False),
           "redis+cluster": ("redis", True), "rediss+cluster": ("rediss", True)}
"""URL scheme → (redis-py's scheme, whether the server is a Redis Cluster)."""
OPTIONS = {"prefix": str, "inline_limit": int, "timeout": float, "connect_timeout": float,
           "retries": int}
"""Query parameters voxcache reads from a Redis URL (any other is refused)."""
PREFIX = re.compile(r"[A-Za-z0-9:_./-]{0,64}")


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """The Redis key names of one deployment (everything under ``prefix``)."""

    prefix: str = DEFAULT_PREFIX

    def entry(self, key: str, kind: str) -> str:
        """Where the entry (or its pointer) of ``key`` and ``kind`` is stored."""
        return f"{self.prefix}{{{key}}}:entry:{kind}"

    def entries(self, key: str) -> str:
        """A SCAN pattern matching every kind stored for ``key``."""
        return f"{self.prefix}{{{key}}}:entry:*"

    def lease(self, key: str) -> str:
        """The render lease of ``key`` (same slot as its entries)."""
        return f"{self.prefix}{{{key}}}:lease"



def parse_url(url: str, options: dict[str, Any]) -> tuple[str, bool, dict[str, Any]]:
    """(redis-py URL, cluster?, voxcache settings) from a tier URL and keyword options."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise InvalidParameter(f"Redis URL {redacted(url)!r} is malformed: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidParameter(
            f"Redis URL {redacted(url)!r}: scheme must be one of "
            f"{', '.join(s + '://' for s in SCHEMES)}")
    scheme, cluster = SCHEMES[parts.scheme]
    if not parts.hostname:
        raise InvalidParameter(f"Redis URL {redacted(url)!r} names no host, e.g. "
                               "redis://127.0.0.1:6379/0")
    db = parts.path.strip("/")
    if db and not db.isdigit() or cluster and db not in ("", "0"):
        raise InvalidParameter(
            f"Redis URL {redacted(url)!r}: the path is a database number (/0)"
            + ("; a Redis Cluster has only database 0" if cluster else ""))
    settings: dict[str, Any] = {}
    for name, raw in parse_qsl(parts.query, keep_blank_values=True):
        settings[name] = _option(name, raw, url)
    for name, value in options.items():
        settings[name] = _option(name, value, url)
    target = urlunsplit((scheme, parts.netloc, "" if cluster else f"/{db or 0}", "", ""))
    return target, cluster, settings


def _option(name: str, value: Any, url: str) -> Any:
    if name not in OPTIONS:
        raise InvalidParameter(f"Redis URL {redacted(url)!r}: unknown option {name!r}; "
                               f"known: {', '.join(OPTIONS)}")
    kind = OPTIONS[name]
    try:
        converted = kind(value)
    except (TypeError, ValueError):
        raise InvalidParameter(f"Redis option {name}={value!r} must be a "
                               f"{kind.__name__}") from None
    if kind is not str and (not math.isfinite(converted) or converted < 0
                            or (name.endswith("timeout") and converted == 0)):
        raise InvalidParameter(f"Redis option {name}={value!r} must be a positive number")
    return converted
