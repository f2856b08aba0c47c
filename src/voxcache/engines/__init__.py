"""Engines by name: plugins of the entry-point group ``voxcache.engines``, or ``module:Class``.

Any installed distribution can provide an engine — built-in ones register the same way
(``[project.entry-points."voxcache.engines"]`` in pyproject.toml) — and an engine class can
be named directly as ``package.module:Class``. Nothing is imported until it is used, and an
engine that fails to import is a clear error naming it and the import error.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ..engine import Engine, accepted_options
from ..errors import EngineLoadError, InvalidParameter
from ..plugins import load_target, origin, registered

GROUP = "voxcache.engines"


@dataclass(frozen=True, slots=True)
class Installed:
    """An engine an installed distribution registers."""

    name: str
    target: str
    """``module:Class``."""
    distribution: str
    """``name version`` of the distribution that registers it."""


def installed() -> list[Installed]:
    """Every engine registered in the ``voxcache.engines`` entry-point group, by name."""
    found = {}
    for point in entry_points(group=GROUP):
        dist = point.dist
        found[point.name] = Installed(point.name, point.value,
                                      "" if dist is None else f"{dist.name} {dist.version}")
    return [found[name] for name in sorted(found)]


def engine_class(name: str) -> type[Engine]:
    """The engine class ``name`` names: a registered engine, or ``module:Class``."""
    if ":" in name:
        return _imported(name, EntryPoint(name, name, GROUP), what=f"engine class {name!r}")
    points = registered(GROUP)
    point = points.get(name)
    if point is None:
        known = ", ".join(sorted(points)) or "none"
        raise InvalidParameter(f"unknown engine {name!r}; installed: {known} (see `voxcache "
                               "engines`), or name a class as package.module:Class")
    return _imported(name, point, what=f"engine plugin {name!r} ({point.value}{origin(point)})")


def load_engine(name: str, **options: Any) -> Engine:
    """The engine ``name`` names, made with ``options`` (its constructor's keyword options;
    an option it does not take is refused, naming the ones it takes)."""
    cls = engine_class(name)
    accepted = accepted_options(cls)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise InvalidParameter(f"engine {name!r} takes no option(s) {', '.join(unknown)}; it "
                               f"takes: {', '.join(sorted(accepted)) or 'none'}")
    return cls(**options)


def _imported(name: str, point: EntryPoint, what: str) -> type[Engine]:
    target = load_target(point, what, error=EngineLoadError)
    if not (isinstance(target, type) and issubclass(target, Engine)):
        raise EngineLoadError(f"{what} is not a voxcache.engine.Engine subclass")
    return target
