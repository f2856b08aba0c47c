"""Settings: one TOML file plus ``VOXCACHE_*`` environment variables.

The only module that reads the environment or a config file. Precedence, lowest first:
defaults, the TOML file, environment variables, command-line options. Sizes take units
(``512MB``, ``5GiB``); shared tiers are URLs in the tier list (``tiers = ["memory",
"disk", "redis://…", "s3://bucket/prefix"]``). docs/operating/settings.md is written from here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache import CacheConfig
from .errors import InvalidParameter
from .logs import LOG_FORMATS
from .tiers.nodes import LOCAL_TIERS, tier_list
from .tiers.publish import DEFAULT_MAX_BYTES

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def default_cache_dir() -> Path:
    """Return the user's cache folder for voxcache (XDG on Linux)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voxcache"


def parse_size(value: str | int | None) -> int | None:
    """Parse ``'512MB'``, ``'5GiB'`` or a plain byte count; None/'' means unbounded."""
    if value is None or value == "" or (isinstance(value, str) and value.lower() == "none"):
        return None
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _UNITS:
        raise InvalidParameter(f"size {value!r} is not understood; write e.g. 512MB or 5GiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of a voxcache process."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    """The cache folder: one per node, on a local filesystem (a network one is refused).
    The service and the command line share it by default, so ``voxcache stats`` describes
    what ``voxcache serve`` stored. ``--cache-dir`` on the command line."""
    engine: str = "piper"
    """The engine: a name `voxcache engines` lists (a plugin of the ``voxcache.engines``
    entry-point group, built-ins included) or ``package.module:Class``."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    """The engine's own constructor options (TOML: an ``[engine_options]`` table;
    ``VOXCACHE_ENGINE_OPTIONS``: a JSON object)."""
    piper_threads: int = 2
    """onnxruntime threads for the piper engine (its ``threads`` option)."""
    memory_budget: int = 256 * 2**20
    """Bytes per artifact kind held in memory."""
    disk_max_bytes: int | None = 5 * 2**30
    """Bytes the disk tier may hold; past it the least valuable entries are evicted (pinned
    ones never). ``none``: unbounded."""
    disk_max_entries: int | None = None
    """Entries the disk tier may hold (``none``: unbounded)."""
    default_ttl: float | None = None
    """Seconds a new take may be served, unless a request gives its own ``ttl``
    (``none``: until evicted or purged)."""
    tiers: tuple[str, ...] = LOCAL_TIERS
    """Tiers in read order: ``memory``, ``disk``, then shared ones (``redis://…``, ``s3://…``;
    docs/operating/cluster.md). TOML: a list; ``VOXCACHE_TIERS``: spellings separated by commas."""
    shared_write_queue: int = DEFAULT_MAX_BYTES
    """Bytes of takes waiting to be written to each shared tier (per process); past it a
    write is shed (counted): the take is served and stored locally, not shared."""
    lock_wait: float = 120.0
    """Seconds a caller waits for another caller's render of the same key (in this process,
    on this machine or, with Redis, on another node) before rendering it itself."""
    max_text_chars: int = 5000
    """Longest text a request may carry, in characters; a longer one is refused (400,
    exit code 2)."""
    log_format: str = "text"
    """Log lines as ``text`` (a UTC timestamp, level, logger, message) or ``json`` (one
    object per line); ``--log-format`` on the command line."""
    segments: str = "auto"
    """Segment mode: ``auto`` (on where the engine splits context-free), ``on`` (or
    ``sentences``), ``clauses`` (below the sentence, for an engine that declares
    ``clause_safe``; refused for any other), ``off``."""
    seed_policy: str = "pin"
    """Unseeded requests: ``pin``, ``bypass``, ``variants:N`` (requests may override it)."""
    model_policy: str = "strict"
    """Takes of an older model revision: ``strict`` or ``stale-while-revalidate``."""
    reference_roots: tuple[Path, ...] = ()
    """Folders clients may name reference clips in (``ref_audio_path``); none: paths refused.
    TOML: a list; ``VOXCACHE_REFERENCE_ROOTS``: folders separated by ``os.pathsep``."""
    reference_max_bytes: int = 10 * 2**20
    """Largest reference clip read by path (the same default as an uploaded clip)."""
    upstream: str | None = None
    """``KIND=URL``: render misses on a running TTS server (the caching gateway)."""
    upstream_revision: str | None = None
    """A label for the model behind the upstream URL; change it when that model changes."""
    upstream_timeout: float = 300.0
    """Seconds a render on the upstream may take before it is given up (an error, nothing
    stored)."""
    upstream_options: dict[str, Any] = field(default_factory=dict)
    """Kind-specific options (``ref_root_upstream``, ``sample_rate``, ``model``…; see
    voxcache.upstream)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Sections this module does not interpret (service, tenants…), passed through."""

    def cache_config(self) -> CacheConfig:
        """Return the cache limits these settings describe."""
        return CacheConfig(memory_default_budget=self.memory_budget,
                           disk_max_bytes=self.disk_max_bytes,
                           disk_max_entries=self.disk_max_entries,
                           default_ttl=self.default_ttl, tiers=self.tiers,
                           shared_write_queue=self.shared_write_queue)


_FIELDS = {f.name: f for f in dataclasses.fields(Settings) if f.name != "extra"}
_SIZES = {"memory_budget", "disk_max_bytes"}


def _coerce(name: str, value: Any) -> Any:
    if name in _SIZES:
        return parse_size(value)
    if name == "reference_roots":
        return _folders(value)
    if name in _SHARED:
        return _SHARED[name](value)
    if name == "reference_max_bytes":
        size = parse_size(value)
        if size is None or size < 1:
            raise InvalidParameter(f"reference_max_bytes must be a size such as 10MB, "
                                   f"got {value!r}")
        return size
    if name == "cache_dir":
        return Path(value).expanduser()
    if name in ("piper_threads", "max_text_chars", "disk_max_entries"):
        return None if value in (None, "", "none") else int(value)
    if name == "log_format":
        if value not in LOG_FORMATS:
            raise InvalidParameter(f"log_format must be one of {', '.join(LOG_FORMATS)}, "
                                   f"got {value!r}")
        return value
    if name in ("upstream_options", "engine_options"):
        return _options(name, value)
    if name in ("default_ttl", "lock_wait", "upstream_timeout"):
        return None if value in (None, "", "none") else _seconds(name, value)
    return value


def _options(name: str, value: Any) -> dict[str, Any]:
    """A table of options: a TOML table, or a JSON object (from the environment); a
    ``ValueError`` naming the setting otherwise (``load_settings`` says "bad setting")."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} must be a JSON object, got {value!r}: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a table of options, got {value!r}")
    return dict(value)


def _tiers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, str | list | tuple):
        raise InvalidParameter(f"tiers must be a list such as [\"memory\", \"disk\", "
                               f"\"redis://host:6379/0\"], got {value!r}")
    return tier_list(value)


def _write_queue(value: Any) -> int:
    size = parse_size(value)
    if size is None or size < 1:
        raise InvalidParameter(f"shared_write_queue must be a size such as 64MB, got {value!r}")
    return size


_SHARED = {"tiers": _tiers, "shared_write_queue": _write_queue}


def _seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds (NaN or Infinity would reach every envelope)."""
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidParameter(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def _folders(value: Any) -> tuple[Path, ...]:
    """A TOML list of folders, or one string of them separated by ``os.pathsep``."""
    if isinstance(value, str):
        value = value.split(os.pathsep)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str | Path) for v in value):
        raise InvalidParameter(f"reference_roots must be a list of folders, got {value!r}")
    folders = tuple(Path(v).expanduser() for v in value if str(v).strip())
    relative = [str(f) for f in folders if not f.is_absolute()]
    if relative:
        raise InvalidParameter(f"reference_roots must be absolute folders, got {relative}")
    return folders


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults, a TOML file, the environment and ``overrides``."""
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    path = config_file or os.environ.get("VOXCACHE_CONFIG")
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidParameter(f"config file {path}: {exc}") from None
        for key, value in data.items():
            (values if key in _FIELDS else extra)[key] = value
    if os.environ.get("VOXCACHE_DIR"):
        values["cache_dir"] = os.environ["VOXCACHE_DIR"]
    for name in _FIELDS:
        env = os.environ.get(f"VOXCACHE_{name.upper()}")
        if env is not None:
            values[name] = env
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        coerced = {k: _coerce(k, v) for k, v in values.items() if k in _FIELDS}
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"bad setting: {exc}") from None
    return Settings(**coerced, extra=extra)
