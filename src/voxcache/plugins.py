"""What an entry point (or a ``package.module:name`` spelling) names, for every plugin group.

Engines (``voxcache.engines``) and tier kinds (``voxcache.tiers``) load through this one
function, so a broken plugin is reported the same way whichever group it registers in:
which plugin, from which distribution, and the import error.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import InvalidParameter, PluginLoadError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


def registered(group: str) -> dict[str, EntryPoint]:
    """The entry points of ``group`` by name (read anew: a plugin installed since counts).
    ``importlib.metadata`` is imported here, by the first use of a name not built in: it
    costs every process ~12 ms, and most never ask."""
    from importlib.metadata import entry_points

    return {point.name: point for point in entry_points(group=group)}


def origin(point: EntryPoint) -> str:
    """`` from <distribution> <version>`` when the entry point has one, else ``""``."""
    dist = point.dist
    return f" from {dist.name} {dist.version}" if dist is not None else ""


def load_target(target: str, what: str, *, error: type[Exception] = PluginLoadError,
                spelled: str = "package.module:Class") -> Any:
    """The object ``target`` (an entry point's value, ``module:attribute``) names; any
    failure to import it is ``error`` naming ``what``."""
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise InvalidParameter(f"{what}: write it as {spelled}")
    try:
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except ImportError as exc:
        raise error(f"{what} could not be imported: {type(exc).__name__}: {exc}") from None
    except AttributeError as exc:
        raise error(f"{what}: {exc}") from None
    except Exception as exc:  # a plugin whose import fails in any other way
        raise error(f"{what} failed while importing: {type(exc).__name__}: {exc}") from None
    return found
