"""Tiers from their configured spelling: ``["memory", "disk", "redis://…", "s3://…"]``.

The configuration names tiers in read order (``tiers = [...]`` in the TOML file,
``VOXCACHE_TIERS=memory,disk,redis://host:6379/0,s3://bucket/prefix``). Each spelling's
scheme names a kind of ``tiers.registry`` (the shipped ones, or a plugin's); a spelling it
cannot use gets a message saying what to write instead, a missing extra the pip command.
A list is built in dependency order (a kind's ``after``): the S3 tier before the Redis tier
that stores its large entries there, the disk tier before the memory tier that asks it for
pins.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import InvalidParameter
from .base import Tier
from .registry import BUILTIN, SHARED_EXTRA, TierKind, forms, kind_of, kinds_for, scheme_of
from .remote import ObjectStore, redacted

__all__ = ["FORMS", "SHARED_EXTRA", "close_all", "split_tier_list", "tier_from_url",
           "tiers_from_urls"]

log = logging.getLogger("voxcache.tiers")
FORMS = forms(BUILTIN)


def tier_from_url(url: str, *, object_tier: ObjectStore | None = None,
                  **options: Any) -> Tier:
    """The tier ``url`` names. ``object_tier`` is where a Redis tier stores entries over
    its inline limit; ``options`` are the tier's own settings (``root`` for disk)."""
    kind = _known(url, kinds_for([url]))
    peers = {} if object_tier is None else {name: object_tier for name in kind.after}
    return kind.build(url.strip(), dict(options), peers)  # type: ignore[arg-type]  # an S3 peer


def tiers_from_urls(urls: Sequence[str], *,
                    options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Tier]:
    """Every tier of a configured list, in its order; ``options`` by tier name
    (``{"disk": {"root": …}, "redis": {"inline_limit": …}}``). If one cannot be built, the
    ones built already are closed before the error goes up."""
    table = kinds_for(urls)
    if not urls:
        raise InvalidParameter(f"the tier list is empty; name at least one of: "
                               f"{', '.join(forms(table))}")
    settings = options or {}
    named = [kind.name if (kind := kind_of(url, table)) else scheme_of(url) for url in urls]
    repeated = sorted({name for name in named if named.count(name) > 1})
    if repeated:
        raise InvalidParameter(f"tier list names {', '.join(repeated)} more than once; each "
                               "tier may appear once")
    found = [_known(url, table) for url in urls]
    built: dict[str, Tier] = {}
    pending = list(range(len(urls)))
    try:
        while pending:
            at = next(at for at in pending if all(
                need in built or need not in named for need in found[at].after))
            kind = found[at]
            peers = {need: built[need] for need in kind.after if need in built}
            built[kind.name] = kind.build(urls[at].strip(), dict(settings.get(kind.name, {})),
                                          peers)
            pending.remove(at)
    except BaseException:
        close_all(built.values())
        raise
    return [built[name] for name in named]


def split_tier_list(text: str) -> list[str]:
    """``memory,disk,redis://…`` (commas or whitespace between) as a list of spellings."""
    return [part for part in re.split(r"[,\s]+", text.strip()) if part]


def _known(url: str, table: Mapping[str, TierKind]) -> TierKind:
    kind = kind_of(url, table)
    if kind is None:
        raise InvalidParameter(f"tier {redacted(url.strip())!r} is not one voxcache knows; "
                               f"write one of: {', '.join(forms(table))}")
    return kind


def close_all(tiers: Iterable[Tier]) -> None:
    """Close each of ``tiers``; one that fails is logged, the others still close."""
    for tier in tiers:
        try:
            tier.close()
        except Exception as exc:  # closing after a failed start: its error is what matters
            log.warning("tier %s not closed cleanly: %s", tier.name, exc)
