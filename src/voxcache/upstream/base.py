"""What every upstream engine shares: its identity in the key, its client, its refusals.

An upstream's model revision names *which server* rendered a take — kind, URL
and whatever model or version the server reports about itself — so two
upstreams never share entries. What a server does not report (the weights
loaded behind GPT-SoVITS' URL, a CosyVoice model directory, Piper's
``--sentence-silence`` flag) is invisible to the gateway: an operator who
changes the model behind the same URL must change ``revision`` (``--upstream
gpt-sovits=URL`` with ``VOXCACHE_UPSTREAM_REVISION=v2pro-2026-03``), otherwise
the old takes keep being served as if nothing changed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..engine import Engine
from ..errors import InvalidParameter, UnsupportedFeature
from ..request import ResolvedRequest
from .http import DEFAULT_READ_TIMEOUT, DEFAULT_RETRIES, UpstreamClient


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

    def __init__(self, url: str, *, revision: str | None = None,
                 timeout: float = DEFAULT_READ_TIMEOUT, retries: int = DEFAULT_RETRIES,
                 headers: dict[str, str] | None = None) -> None:
        self.url = check_url(url)
        self.id = self.kind
        self.revision_label = revision
        self.client = UpstreamClient(self.url, timeout=timeout, retries=retries,
                                     headers=headers)
        self.model_revision = self.identity()

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
