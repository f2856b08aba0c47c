"""Tier kinds as data: a spelling's scheme names a kind, and a kind says how it is built.

The shipped kinds are ``BUILTIN``; an installed distribution adds one through the
``voxcache.tiers`` entry-point group (``<scheme> = "package.module:factory"``, called as
``factory(spelling, **options)`` and returning a ``Tier``), loaded by the plugin loader
engines use (``voxcache.plugins``). A plugin cannot take over a shipped scheme.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidParameter, MissingDependency, PluginLoadError
from ..plugins import load_target, origin, registered
from ..vocabulary import TierName
from .base import Tier
from .memory import DEFAULT_KIND_BUDGET, MemoryTier

__all__ = ["BUILTIN", "DEFAULT_KIND_BUDGET", "GROUP", "TierKind", "kind_of", "kinds",
           "kinds_for"]

GROUP = "voxcache.tiers"
SHARED_EXTRA = "pip install 'voxcache[shared]'"
Build = Callable[[str, dict[str, Any], Mapping[str, Tier]], Tier]
"""(spelling, the tier's options, the tiers it comes ``after`` by kind) → the tier."""


@dataclass(frozen=True, slots=True)
class TierKind:
    """One kind of tier: its name (``X-Cache-Tier``), how it is spelled, how it is built."""

    name: str
    schemes: tuple[str, ...]
    forms: tuple[str, ...]
    """Spellings shown when a list names something unknown."""
    build: Build
    after: tuple[str, ...] = ()
    """Kinds built first when the list names them too, handed to ``build``."""


def _memory(spelling: str, options: dict[str, Any], peers: Mapping[str, Tier]) -> Tier:
    folder = peers.get(TierName.DISK)
    if folder is not None:  # pins live in the folder; memory keeps pinned takes through pressure
        options.setdefault("pinned", folder.is_pinned)  # type: ignore[attr-defined]  # a DiskTier
    return MemoryTier(**options)


def _disk(spelling: str, options: dict[str, Any], peers: Mapping[str, Tier]) -> Tier:
    from .disk import DiskTier

    if "root" not in options:
        raise InvalidParameter("the disk tier needs its folder (root=…; the cache folder)")
    return DiskTier(Path(options.pop("root")), **options)


def _redis(spelling: str, options: dict[str, Any], peers: Mapping[str, Tier]) -> Tier:
    try:
        from .redis import RedisTier
    except ImportError as exc:
        raise MissingDependency(f"the Redis tier needs redis-py with hiredis ({exc}): "
                                f"{SHARED_EXTRA}") from None
    # entries over Redis' inline limit go to the S3 tier, pointed to from Redis
    return RedisTier.from_url(spelling, object_store=peers.get(TierName.S3),  # type: ignore[arg-type]  # an S3Tier
                              **options)


def _s3(spelling: str, options: dict[str, Any], peers: Mapping[str, Tier]) -> Tier:
    try:
        from .s3 import S3Tier
    except ImportError as exc:
        raise MissingDependency(f"the S3 tier needs boto3 ({exc}): {SHARED_EXTRA}") from None
    return S3Tier.from_url(spelling, **options)


BUILTIN: dict[str, TierKind] = {kind.name: kind for kind in (
    TierKind(TierName.MEMORY, ("memory",), ("memory",), _memory, after=(TierName.DISK,)),
    TierKind(TierName.DISK, ("disk",), ("disk",), _disk),
    TierKind(TierName.REDIS, ("redis", "rediss", "redis+cluster", "rediss+cluster"),
             ("redis://host:6379/0", "rediss://host:6380/0", "redis+cluster://host:7000"),
             _redis, after=(TierName.S3,)),
    TierKind(TierName.S3, ("s3",), ("s3://bucket/prefix",), _s3),
)}


def kinds() -> dict[str, TierKind]:
    """Every kind by name: the shipped ones, then the installed plugins' (read anew)."""
    found = dict(BUILTIN)
    taken = {scheme for kind in BUILTIN.values() for scheme in kind.schemes}
    for name, point in sorted(registered(GROUP).items()):
        if name.lower() not in taken:
            found[name] = TierKind(name, (name.lower(),), (f"{name}://…",), _plugin(point))
    return found


def kinds_for(spellings: Sequence[str]) -> Mapping[str, TierKind]:
    """The table to read ``spellings`` with: the shipped kinds when they name only those
    (the plugins are found by scanning every installed distribution's entry points),
    else every kind."""
    if spellings and all(kind_of(spelling, BUILTIN) for spelling in spellings):
        return BUILTIN
    return kinds()


def forms(table: Mapping[str, TierKind]) -> tuple[str, ...]:
    """How each kind of ``table`` is written, in order."""
    return tuple(form for kind in table.values() for form in kind.forms)


def scheme_of(spelling: str) -> str:
    """``redis`` of ``redis://h:1/0``; a spelling without ``://`` is its own scheme."""
    text = spelling.strip()
    return (text.split("://", 1)[0] if "://" in text else text).lower()


def kind_of(spelling: str, table: Mapping[str, TierKind]) -> TierKind | None:
    """The kind whose schemes include ``spelling``'s, if any."""
    scheme = scheme_of(spelling)
    return next((kind for kind in table.values() if scheme in kind.schemes), None)


def _plugin(point: Any) -> Build:
    """A plugin's factory, imported when a list first names its scheme."""
    what = f"tier plugin {point.name!r} ({point.value}{origin(point)})"

    def build(spelling: str, options: dict[str, Any], peers: Mapping[str, Tier]) -> Tier:
        factory = load_target(point.value, what, spelled="package.module:factory")
        if not callable(factory):
            raise PluginLoadError(f"{what} is not callable")
        tier = factory(spelling, **options)
        if not isinstance(tier, Tier):
            raise PluginLoadError(f"{what} made a {type(tier).__name__}, which is not a "
                                  "voxcache.tiers.base.Tier")
        return tier

    return build
