"""Registries as data: names → ``module:Class``, built in or added by installed distributions.

One mechanism for engines (``voxcache.engines``) and upstream kinds (``voxcache.upstream``):
the built-in entries are a dict beside the code that owns them, any distribution adds more
under the registry's entry-point group, and a built-in name is never taken over by a plugin
(a name in a key keeps meaning one class). Nothing is imported until it is used; targets load
through ``voxcache.plugins``, like tier kinds, so a broken one is reported the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import EngineLoadError, InvalidParameter
from .plugins import load_target, registered
from .version import __version__

OURS = f"voxcache {__version__}"
"""The distribution of the built-in names, as an entry point of voxcache's would name it."""


@dataclass(frozen=True, slots=True)
class Installed:
    """One registered name."""

    name: str
    target: str
    """``module:Class``."""
    distribution: str
    """``name version`` of the distribution that registers it (voxcache for built-ins)."""


@dataclass(frozen=True)
class Registry:
    """Names of one kind of class: ``builtin`` plus the plugins of entry-point ``group``."""

    what: str
    """What a name names, for messages: ``engine``, ``upstream kind``."""
    group: str
    base: type
    """Every target must be a subclass of this."""
    builtin: Mapping[str, str]

    def installed(self) -> list[Installed]:
        """Every registered name, sorted: the built-in ones, then plugins."""
        found = {name: Installed(name, target, OURS)
                 for name, target in self.builtin.items()}
        for point in registered(self.group).values():
            if point.name not in self.builtin:
                dist = point.dist
                found[point.name] = Installed(
                    point.name, point.value, "" if dist is None else f"{dist.name} {dist.version}")
        return [found[name] for name in sorted(found)]

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return [entry.name for entry in self.installed()]

    def find(self, name: str) -> Installed | None:
        """The entry ``name`` names, or None (a built-in name without reading the installed
        distributions' entry points: a scan of every one of them)."""
        if name in self.builtin:
            return Installed(name, self.builtin[name], OURS)
        return next((entry for entry in self.installed() if entry.name == name), None)

    def load(self, name: str, unknown: Callable[[str], str]) -> type:
        """The class registered as ``name``; an unknown name is an ``InvalidParameter`` saying
        ``unknown(the registered names)``."""
        entry = self.find(name)
        if entry is None:
            raise InvalidParameter(unknown(", ".join(self.names()) or "none"))
        kind = self.what if name in self.builtin else f"{self.what} plugin"
        return self.imported(entry.target,
                             f"{kind} {name!r} ({entry.target} from {entry.distribution})")

    def imported(self, target: str, what: str) -> type:
        """Import ``module:Class`` (through ``voxcache.plugins``, the loader every plugin group
        uses) and check it is a ``base``; ``what`` names it in errors."""
        found = load_target(target, what, error=EngineLoadError)
        if not (isinstance(found, type) and issubclass(found, self.base)):
            raise EngineLoadError(f"{what} is not a {self.base.__module__}."
                                  f"{self.base.__qualname__} subclass")
        return found


