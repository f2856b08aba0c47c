"""What every upstream engine shares: its identity in the key, its client, its refusals.

An upstream's model revision names which server rendered a take (kind, URL, what the server
reports about its model), so two upstreams never share entries. What a server does not
report (the weights behind GPT-SoVITS' URL, Piper's ``--sentence-silence``) the operator
names with ``revision``; a switch proxied through the gateway is in the revision
(``upstream.revision``). A kind that cannot be asked, with neither, is warned about at
start. docs/operating/gateway.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..engine import Engine
from ..errors import InvalidParameter, UnsupportedFeature
from ..request import ResolvedRequest
from .health import Reachability
from .http import DEFAULT_READ_TIMEOUT, DEFAULT_RETRIES, UpstreamClient
from .transport import DEFAULT_MAX_ANSWER_BYTES

if TYPE_CHECKING:
    from ..cache import Cache
    from .revision import Switchboard

log = logging.getLogger("voxcache.upstream")

MODEL_SILENT_KINDS = frozenset({"gpt-sovits", "cosyvoice"})
"""Kinds whose servers say nothing about the weights they run (piper-http reports its voice
and config, an OpenAI-compatible server is told its ``model`` in every request)."""


def check_url(url: str) -> str:
    """Return ``url`` without a trailing slash, or refuse one that is not http(s)://host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidParameter(
            f"upstream URL {url!r} must be http:// or https:// with a host, "
            "e.g. http://127.0.0.1:9880"
        )
    if parts.query or parts.fragment:
        raise InvalidParameter(f"upstream URL {url!r} must not carry a query or fragment")
    return url.rstrip("/")


class UpstreamEngine(Engine):
    """An engine that renders by calling a TTS server over HTTP."""

    kind = "upstream"
    switchboard: Switchboard | None = None
    """The switch state shared through the cache folder, once ``attach``-ed."""
    probe_path = "/"
    """What a health probe asks (any HTTP answer, 404 included, means reachable)."""

    def __init__(self, url: str, *, revision: str | None = None,
                 timeout: float = DEFAULT_READ_TIMEOUT, retries: int = DEFAULT_RETRIES,
                 headers: dict[str, str] | None = None,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
        """``timeout``: seconds one whole answer may take (not one read); ``retries``:
        attempts more when the connection itself failed; ``headers``: sent with every call;
        ``max_answer_bytes``: the largest answer read (a larger one is refused)."""
        self.url = check_url(url)
        self.id = self.kind
        self.revision_label = revision
        self.in_force: dict[str, str] = {}
        """What proxied switches put in force (e.g. ``gpt``/``sovits`` weights paths)."""
        self.client = UpstreamClient(
            self.url, timeout=seconds_option("timeout", timeout),
            retries=count_option("retries", retries), headers=headers_option(headers),
            max_answer_bytes=count_option("max_answer_bytes", max_answer_bytes, least=1),
            health=Reachability("upstream", self.kind, self.url))
        self.model_revision = self.identity()

    def reachability(self, refresh: bool = True) -> list[dict[str, Any]]:
        """Whether the upstream answers, since when, and the last error (``/readyz``,
        ``voxcache_upstream_up``); with ``refresh``, probed first when no call said so
        recently (blocking for up to ``health.PROBE_SECONDS``: the service calls it in
        its I/O pool)."""
        return [self._reachability(self.client, refresh)]

    def _reachability(self, client: Any, refresh: bool) -> dict[str, Any]:
        if refresh and client.health.stale():
            client.probe(self.probe_path)
        return {"role": client.health.role, **client.health.describe()}

    def stop_waiting(self, grace: float) -> None:
        """The service is stopping: cut off calls to the upstream still running ``grace``
        seconds from now (their callers get 503), so a hung upstream cannot hold it."""
        self.client.stop(grace)

    @property  # type: ignore[override]
    def model_revision(self) -> str:
        """The revision in force: the upstream's identity plus what switches put in force."""
        return self._revision

    @model_revision.setter
    def model_revision(self, identity: str) -> None:
        self._identity = identity
        self._revision = _with_switches(identity, self.in_force)

    def put_in_force(self, switched: Mapping[str, str]) -> None:
        """A switch (here or in another process) changed what the upstream renders with."""
        self.in_force = dict(switched)
        self._revision = _with_switches(self._identity, self.in_force)

    @property
    def reports_model(self) -> bool:
        """Whether the gateway can learn from the server itself which model renders."""
        return self.kind not in MODEL_SILENT_KINDS

    def attach(self, cache: Cache) -> None:
        """Put the switch state recorded in ``cache``'s folder in force, follow the other
        processes' switches, and warn loudly when nothing says which model renders."""
        if self.switchboard is not None:
            return
        from .revision import Switchboard

        self.switchboard = Switchboard(cache, self)
        if not (self.reports_model or self.revision_label or self.switchboard.known):
            log.warning(
                "UPSTREAM REVISION UNKNOWN: %s at %s cannot say which weights it runs, and "
                "neither --upstream-revision (upstream_revision) nor a switch proxied through "
                "this gateway names them. If its model is changed behind the gateway's back, "
                "takes of the old model will be served as the new one's. Set "
                "--upstream-revision to a label of the model and change it with the model, "
                "or switch weights through this gateway.", self.kind, self.url)

    def identity(self, *reported: Any) -> str:
        """Kind, URL, what the upstream reports, and the operator's label — the key's model."""
        parts = [self.kind, self.url, *(str(r) for r in reported if r not in (None, ""))]
        if self.revision_label:
            parts.append(f"rev={self.revision_label}")
        return "|".join(parts)

    def refuse_unhonoured(self, request: ResolvedRequest) -> None:
        """Refuse fields this upstream's protocol has no way to pass on."""
        if request.seed is not None and not self.supports_seed:
            raise UnsupportedFeature(
                f"upstream {self.kind!r} takes no seed; remove it (or send -1)")
        if request.speed != 1.0 and not self.speed_supported():
            raise UnsupportedFeature(
                f"upstream {self.kind!r} cannot change speed; send speed 1.0")

    def speed_supported(self) -> bool:
        """Whether the protocol carries a speed (overridden where it does)."""
        return True

    def describe(self) -> dict[str, object]:
        """The engine summary plus where it forwards misses."""
        return {**super().describe(), "upstream": {"kind": self.kind, "url": self.url}}


def _with_switches(identity: str, in_force: Mapping[str, str]) -> str:
    """``identity|name=value…`` in name order (nothing appended before any switch)."""
    return "|".join([identity, *(f"{k}={in_force[k]}" for k in sorted(in_force))])


def seconds_option(name: str, value: Any) -> float:
    """A number of seconds above zero (an option from TOML or JSON may be anything)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise InvalidParameter(f"upstream option {name} must be a positive number of seconds, "
                               f"got {value!r}")
    return float(value)


def count_option(name: str, value: Any, least: int = 0) -> int:
    """A whole number of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidParameter(f"upstream option {name} must be a whole number of at least "
                               f"{least}, got {value!r}")
    return value


def headers_option(value: Any) -> dict[str, str] | None:
    """The ``headers`` option checked: names to strings (None: none)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidParameter(f"upstream option headers must be a table of names to "
                               f"strings, e.g. {{X-Team = \"tts\"}}, got {value!r}")
    return dict(value)
