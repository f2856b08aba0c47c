"""voxcache: an inference cache for text-to-speech and voice cloning."""

from __future__ import annotations

from .audio import Audio
from .cache import Cache, CacheConfig
from .cached import CachedEngine, Result
from .engine import Engine
from .engines import load_engine
from .errors import VoxcacheError
from .params import ParamSpec
from .request import SynthesisRequest
from .version import __version__

__all__ = [
    "Audio",
    "Cache",
    "CacheConfig",
    "CachedEngine",
    "Engine",
    "ParamSpec",
    "Result",
    "SynthesisRequest",
    "VoxcacheError",
    "__version__",
    "load_engine",
]
