"""Service settings: the ``[service]``, ``[tenants.*]``, ``[admin]`` and ``[voice_aliases]``
TOML sections.

The core ``Settings`` passes sections it does not interpret through ``extra``;
this module is where the service reads them, so every limit the server enforces
has one name, one default and one place that logs it. Environment variables
``VOXCACHE_SERVICE_<NAME>`` override the ``[service]`` table.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings, parse_size
from ..errors import InvalidParameter
from ..protocols.openai.fields import OPENAI_MODELS, OPENAI_VOICES

__all__ = ["OPENAI_MODELS", "OPENAI_VOICES", "ServiceOptions", "service_options"]
# OpenAI's voice names alias the engine's default voice unless ``[voice_aliases]`` maps them
# elsewhere, so the official client's examples work unchanged


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    """Every limit and switch of the HTTP service."""

    render_concurrency: int = 1
    """Renders running at once per engine (Piper uses all its threads for one)."""
    render_queue: int = 16
    """Renders allowed to wait for a slot; beyond it a miss gets 503 + Retry-After."""
    io_threads: int = 8
    """Threads reading the disk tier, separate from render slots: hits never queue
    behind renders."""
    max_body_bytes: int = 1 << 20
    """Largest JSON body accepted."""
    max_upload_bytes: int = 10 << 20
    """Largest reference clip accepted by POST /v1/voices."""
    max_upload_seconds: float = 60.0
    """Longest reference clip accepted by POST /v1/voices, in seconds of audio."""
    request_timeout: float = 300.0
    """Longest a request waits for its render (joiners included)."""
    header_timeout: float = 10.0
    """Seconds a connection may take to send a request's headers, counted from when it
    opened or from the end of its previous response: an idle or trickling (slowloris)
    connection is closed after it, so it cannot hold a socket forever."""
    body_timeout: float = 30.0
    """Seconds a request's whole body may take to arrive once its headers are in; a client
    trickling bytes gets 408 instead of holding a worker's buffer open."""
    shutdown_grace: float = 10.0
    """Seconds an upstream's answer still running when SIGTERM (or Ctrl-C) arrives may take
    before it is cut off (its callers get 503 and ``Retry-After``; nothing is stored), so a
    hung upstream or center cannot hold the process. An embedded engine's render is not cut
    off: it finishes within ``serve --graceful-timeout``."""
    upstream_required: bool = False
    """Whether ``/readyz`` answers 503 while the upstream (or an edge's center) is
    unreachable. Off by default: hits are still served, so a balancer should keep sending
    traffic; ``/readyz`` and ``voxcache_upstream_up`` say it is down either way."""
    switch_interval: float = 0.0005
    """Seconds a thread may hold the GIL before yielding (``sys.setswitchinterval``; 0
    leaves Python's 5 ms). A render thread running Python code between model calls
    otherwise makes every hit on the event loop wait up to 5 ms per hand-over: measured
    with Piper on 2 cores, hit median 1.0 → 12.5 ms under load at 5 ms, → 1.6 ms at 0.5 ms."""
    privacy: bool = False
    """Default for uploads: keep only the fingerprint, never the raw clip."""
    allow_public: bool = False
    """Bind a non-loopback address even with no API keys configured (``serve
    --allow-public``): anyone who reaches the port may render and clone voices."""
    access_log: bool = True
    """One line per request on the ``voxcache.access`` logger (service/access_log.py)."""
    voice_aliases: dict[str, str] = field(default_factory=dict)
    """Extra voice name → engine voice; OpenAI names map to the default voice unless set."""
    api_keys: dict[str, str] = field(default_factory=dict)
    """API key → tenant id. Empty: no auth, every request is tenant ``default``."""
    admin_keys: frozenset[str] = frozenset()
    """``[admin] api_keys``: the keys that may read server-wide figures (``/metrics``,
    ``/v1/stats``). A tenant's key may not: those figures span every tenant."""

    @property
    def keyed(self) -> bool:
        """True when any key (tenant or admin) is configured: the server is not open."""
        return bool(self.api_keys or self.admin_keys)

    def describe(self) -> dict[str, Any]:
        """Effective limits, as logged at start (keys are never logged)."""
        data = dataclasses.asdict(self)
        data["api_keys"] = f"{len(self.api_keys)} key(s) for " \
                           f"{len(set(self.api_keys.values()))} tenant(s)"
        data["admin_keys"] = f"{len(self.admin_keys)} key(s)"
        return data


_NUMBERS = {"render_concurrency": int, "render_queue": int, "io_threads": int,
            "max_upload_seconds": float, "request_timeout": float, "switch_interval": float,
            "header_timeout": float, "body_timeout": float, "shutdown_grace": float}
_POSITIVE = ("max_upload_seconds", "request_timeout", "header_timeout", "body_timeout")
_SIZES = ("max_body_bytes", "max_upload_bytes")
_BOOLS = ("privacy", "allow_public", "access_log", "upstream_required")


def service_options(settings: Settings, **overrides: Any) -> ServiceOptions:
    """Read the service's sections out of ``settings.extra`` plus the environment."""
    table: dict[str, Any] = dict(settings.extra.get("service", {}))
    for name in (*_NUMBERS, *_SIZES, *_BOOLS):
        env = os.environ.get(f"VOXCACHE_SERVICE_{name.upper()}")
        if env is not None:
            table[name] = env
    table.update({k: v for k, v in overrides.items() if v is not None})
    values: dict[str, Any] = {}
    try:
        for name, value in table.items():
            if name in _NUMBERS:
                values[name] = _NUMBERS[name](value)
            elif name in _SIZES:
                values[name] = parse_size(value)
            elif name in _BOOLS:
                values[name] = value if isinstance(value, bool) else str(value).lower() in (
                    "1", "true", "yes")
            else:
                raise InvalidParameter(f"[service] has no setting {name!r}")
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"bad [service] setting: {exc}") from None
    for name in _POSITIVE:
        if name in values and not (math.isfinite(values[name]) and values[name] > 0):
            raise InvalidParameter(f"[service] {name} must be a positive number of seconds, "
                                   f"got {values[name]}")
    grace = values.get("shutdown_grace", 0.0)
    if not (math.isfinite(grace) and grace >= 0):
        raise InvalidParameter(f"[service] shutdown_grace must be 0 or more seconds, got {grace}")
    aliases = {str(k): str(v) for k, v in settings.extra.get("voice_aliases", {}).items()}
    api_keys = _api_keys(settings.extra.get("tenants", {}))
    return ServiceOptions(**values, voice_aliases=aliases, api_keys=api_keys,
                          admin_keys=_admin_keys(settings.extra.get("admin", {}), api_keys))


def _api_keys(tenants: dict[str, Any]) -> dict[str, str]:
    """``[tenants.acme] api_keys = [...]`` → {key: "acme"}; a key may name one tenant only."""
    keys: dict[str, str] = {}
    for tenant, table in tenants.items():
        for key in (table or {}).get("api_keys", []):
            if not isinstance(key, str) or len(key) < 8:
                raise InvalidParameter(f"[tenants.{tenant}] api_keys must be strings of 8+ chars")
            if keys.setdefault(key, tenant) != tenant:
                raise InvalidParameter(f"an API key is listed for two tenants ({tenant})")
    return keys


def _admin_keys(table: Any, tenant_keys: dict[str, str]) -> frozenset[str]:
    """``[admin] api_keys = [...]``: 8+ characters each, and never also a tenant's key (one
    key, one role: a tenant must not read every tenant's figures by accident of config)."""
    if not isinstance(table, dict):
        raise InvalidParameter("[admin] must be a table, e.g. [admin] api_keys = [\"…\"]")
    unknown = sorted(set(table) - {"api_keys"})
    if unknown:
        raise InvalidParameter(f"[admin] has no setting {unknown[0]!r}; it takes api_keys")
    keys = table.get("api_keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and len(k) >= 8 for k in keys):
        raise InvalidParameter("[admin] api_keys must be a list of strings of 8+ chars")
    for key in keys:
        if key in tenant_keys:
            raise InvalidParameter(f"an [admin] API key is also a key of [tenants."
                                   f"{tenant_keys[key]}]; give the admin its own key")
    return frozenset(keys)
