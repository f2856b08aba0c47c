"""Tiers from their configured spelling: ``["memory", "disk", "redis://…", "s3://…"]``.

The configuration names tiers in read order (``tiers = [...]`` in the TOML file,
``VOXCACHE_TIERS=memory,disk,redis://host:6379/0,s3://bucket/prefix``). This module
turns each spelling into a tier, with a message that says what to write instead
for a spelling it cannot use, and the pip command for an extra that is missing.
The shared tiers' client libraries are imported only when a URL asks for them, so
a memory + disk set-up needs none of them.

    memory                         MemoryTier(**options)
    disk                           DiskTier(options["root"], …)
    redis://host:port/db           RedisTier (``rediss://`` for TLS)
    redis+cluster://host:port      RedisTier on a Redis Cluster (any node; ``rediss+cluster``)
    s3://bucket/prefix             S3Tier (endpoint, keys: the standard AWS variables)

``tiers_from_urls`` builds a whole list and gives the Redis tier the S3 tier as its
object tier, so entries over Redis' inline limit are stored in S3 and pointed to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidParameter, MissingDependency
from .base import Tier
from .remote import ObjectStore, redacted

SHARED_EXTRA = "pip install 'voxcache[shared]'"
FORMS = ("memory", "disk", "redis://host:6379/0", "rediss://host:6380/0",
         "redis+cluster://host:7000", "s3://bucket/prefix")


def tier_from_url(url: str, *, object_tier: ObjectStore | None = None,
                  **options: Any) -> Tier:
    """The tier ``url`` names. ``object_tier`` is where a Redis tier stores entries over
    its inline limit; ``options`` are the tier's own settings (``root`` for disk)."""
    spelling = url.strip()
    scheme = spelling.split("://", 1)[0].lower() if "://" in spelling else spelling.lower()
    if scheme == "memory":
        from .memory import MemoryTier

        return MemoryTier(**options)
    if scheme == "disk":
        from .disk import DiskTier

        if "root" not in options:
            raise InvalidParameter("the disk tier needs its folder (root=…; the cache folder)")
        return DiskTier(Path(options.pop("root")), **options)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        try:
            from .redis import RedisTier
        except ImportError as exc:
            raise MissingDependency(f"the Redis tier needs redis-py with hiredis ({exc}): "
                                    f"{SHARED_EXTRA}") from None
        return RedisTier.from_url(spelling, object_store=object_tier, **options)
    if scheme == "s3":
        try:
            from .s3 import S3Tier
        except ImportError as exc:
            raise MissingDependency(f"the S3 tier needs boto3 ({exc}): {SHARED_EXTRA}"
                                    ) from None
        return S3Tier.from_url(spelling, **options)
    raise InvalidParameter(f"tier {redacted(spelling)!r} is not one voxcache knows; write one "
                           f"of: {', '.join(FORMS)}")


def tiers_from_urls(urls: Sequence[str], *,
                    options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Tier]:
    """Every tier of a configured list, in its order; ``options`` by tier name
    (``{"disk": {"root": …}, "redis": {"inline_limit": …}}``). A Redis tier listed with
    an S3 tier stores its large entries there."""
    if not urls:
        raise InvalidParameter(f"the tier list is empty; name at least one of: "
                               f"{', '.join(FORMS)}")
    settings = options or {}
    kinds = [_name_of(url) for url in urls]
    repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if repeated:
        raise InvalidParameter(f"tier list names {', '.join(repeated)} more than once; each "
                               "tier may appear once")
    built: dict[int, Tier] = {}
    object_tier: Any = None
    if "s3" in kinds:  # made first, so the Redis tier can point into it
        at = kinds.index("s3")
        object_tier = built[at] = tier_from_url(urls[at], **settings.get("s3", {}))
    for at, url in enumerate(urls):
        if at not in built:
            built[at] = tier_from_url(url, object_tier=object_tier if kinds[at] == "redis"
                                      else None, **dict(settings.get(kinds[at], {})))
    return [built[at] for at in range(len(urls))]


def split_tier_list(text: str) -> list[str]:
    """``memory,disk,redis://…`` (commas or whitespace between) as a list of spellings."""
    return [part for part in re.split(r"[,\s]+", text.strip()) if part]


def _name_of(url: str) -> str:
    """The tier name a spelling yields (what ``X-Cache-Tier`` says)."""
    scheme = url.strip().split("://", 1)[0].lower()
    return {"rediss": "redis", "redis+cluster": "redis", "rediss+cluster": "redis"}.get(
        scheme, scheme)
