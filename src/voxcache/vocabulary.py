"""The words voxcache's parts exchange, as types: a misspelt tier or counter is an
``AttributeError`` where it is written, not a metric nobody reads. The values are the
exact strings headers, counters and metrics carry (``StrEnum``: each *is* its string)."""

from __future__ import annotations

from enum import StrEnum


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
