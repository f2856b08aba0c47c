"""Engines by name: the built-in ones, plugins of the entry-point group ``voxcache.engines``, or
``module:Class`` (one registry mechanism with the upstream kinds: ``voxcache.registry``).

Any installed distribution can provide an engine (docs/internals/extending.md) and an engine class
can be named directly as ``package.module:Class``. Nothing is imported until it is used, and an
engine that fails to import is a clear error naming it and the import error.
"""

from __future__ import annotations

from typing import Any, cast

from ..engine import Engine, accepted_options
from ..errors import InvalidParameter
from ..registry import Installed, Registry

GROUP = "voxcache.engines"
ENGINES = Registry("engine", GROUP, Engine, {
    "piper": "voxcache.engines.piper:PiperEngine",
    "tone": "voxcache.engines.tone:ToneEngine",
})
"""The built-in engines (data); plugins add theirs under ``GROUP``."""

__all__ = ["ENGINES", "GROUP", "Installed", "engine_class", "installed", "load_engine"]


def installed() -> list[Installed]:
    """Every engine this installation has (built-in and plugins), by name."""
    return ENGINES.installed()


def engine_class(name: str) -> type[Engine]:
    """The engine class ``name`` names: a registered engine, or ``module:Class``."""
    if ":" in name:
        return cast(type[Engine], ENGINES.imported(name, f"engine class {name!r}"))
    return cast(type[Engine], ENGINES.load(
        name, lambda names: f"unknown engine {name!r}; installed: {names} (see `voxcache "
        "engines`), or name a class as package.module:Class"))


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
