"""Built-in engines, loaded by name so that none is imported unless it is used."""

from __future__ import annotations

from typing import Any

from ..engine import Engine
from ..errors import InvalidParameter

BUILTIN = ("piper", "tone")


def load_engine(name: str, **options: Any) -> Engine:
    """Return a built-in engine by name (``piper`` needs the [piper] extra)."""
    if name == "piper":
        from .piper import PiperEngine

        return PiperEngine(**options)
    if name == "tone":
        from .tone import ToneEngine

        return ToneEngine(**options)
    raise InvalidParameter(f"unknown engine {name!r}; built in: {', '.join(BUILTIN)}")
