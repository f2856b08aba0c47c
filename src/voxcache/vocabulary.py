"""The words voxcache's parts exchange, as types: a misspelt tier, counter, outcome or mode
is an ``AttributeError`` where it is written, not a metric nobody reads. The values are the
exact strings headers, counters and metrics carry (``StrEnum``: each *is* its string)."""

from __future__ import annotations

from enum import StrEnum

from .errors import InvalidParameter

# -- tiers and their counters ---------------------------------------------------------------------

class TierName(StrEnum):
    """The shipped tiers' names (``X-Cache-Tier``, the ``tier`` label of the metrics)."""

    MEMORY = "memory"
    DISK = "disk"
    REDIS = "redis"
    S3 = "s3"


class TierCount(StrEnum):
    """What is counted per tier, as the pattern of the persisted counter's name."""

    HITS = "hits_{tier}"
    """A take served from the tier (``Result.tier``)."""
    WRITES_SHED = "{tier}_writes_shed"
    """Takes the shared tier's write-behind queue dropped (over its bytes)."""
    WRITES_FAILED = "{tier}_writes_failed"
    REALIGNED = "{tier}_realigned"
    """Takes a shared tier held that another tier's answer replaced."""
    FOLDED = "{tier}_{count}"
    """A shared tier's own count (``stats()["counts"]``), folded into the folder's."""

    def of(self, tier: str, count: str = "") -> str:
        """The counter's name for ``tier`` (``count``: the tier's own name, for FOLDED)."""
        return self.value.format(tier=tier, count=count)


# -- outcomes and cache modes -------------------------------------------------------------------


class Outcome(StrEnum):
    """How a take was served: ``Result.cache`` (the value, lowercase) and the ``X-Cache``
    header, the counters' ``cache`` label and the access log (``header``, uppercase)."""

    HIT = "hit"
    MISS = "miss"
    JOINED = "joined"
    """Another caller's render was shared."""
    PARTIAL = "partial"
    """Some sentences came from the cache, the rest were rendered."""
    STALE = "stale"
    """An older model's take, re-rendered in the background."""
    BYPASS = "bypass"
    """Rendered, not stored."""

    @property
    def header(self) -> str:
        """The ``X-Cache`` spelling."""
        return _HEADERS[self]


_HEADERS = {outcome: outcome.value.upper() for outcome in Outcome}


class Mode(StrEnum):
    """What a request asks of the cache (the ``cache`` body field, ``X-Cache-Mode``)."""

    USE = "use"
    BYPASS = "bypass"
    """Render, store nothing."""
    REFRESH = "refresh"
    """Drop the stored take, render it again."""


MODES = tuple(Mode)


def cache_mode(header: str | None, field: str = Mode.USE) -> Mode:
    """The request's mode: ``X-Cache-Mode`` (for clients that cannot add body fields) beats
    the body's field; anything else is refused naming the values that work."""
    given = field if header is None else header
    try:
        return Mode(given)
    except ValueError:
        name = "cache mode" if header is None else "X-Cache-Mode"
        raise InvalidParameter(f"{name} must be one of {', '.join(MODES)}, "
                               f"got {given!r}") from None
