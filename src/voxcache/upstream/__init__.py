"""The caching gateway's upstreams: engines that render misses on a running TTS server.

``voxcache serve --upstream KIND=URL`` puts the cache in front of a server that already exists;
clients keep their protocol and each distinct request reaches the server once. The kinds are
data (``UPSTREAMS``, the registry mechanism engines use: ``voxcache.registry``); each protocol's
client lives in its folder under ``voxcache.protocols``, and this package keeps what they share
(transport, HTTP, health, decoding, revisions) and the edge's client (``upstream.voxcache``).
"""

from __future__ import annotations

from typing import Any, cast

from ..engine import Engine, accepted_options
from ..errors import InvalidParameter
from ..registry import Registry
from .base import UpstreamEngine, check_url

UPSTREAMS = Registry("upstream kind", "voxcache.upstreams", UpstreamEngine, {
    "gpt-sovits": "voxcache.protocols.gpt_sovits.upstream:GptSovitsEngine",  # api_v2 POST /tts
    "cosyvoice": "voxcache.protocols.cosyvoice.upstream:CosyVoiceEngine",  # /inference_*, PCM
    "openai": "voxcache.protocols.openai.upstream:OpenAISpeechEngine",  # any /v1/audio/speech
    "piper-http": "voxcache.protocols.piper.upstream:PiperHttpEngine",  # piper.http_server
    "voxcache": "voxcache.upstream.voxcache:VoxcacheEdgeEngine",  # a central voxcache (edges)
})
"""The built-in upstream kinds (data); plugins add theirs under ``voxcache.upstreams``."""

__all__ = ["UPSTREAMS", "UpstreamEngine", "load_upstream", "parse_upstream", "upstream_class"]


def parse_upstream(spec: str) -> tuple[str, str]:
    """Split ``KIND=URL`` and check both parts, with errors that show a correct spelling."""
    kind, sep, url = (spec or "").partition("=")
    kind = kind.strip().lower()
    kinds = ", ".join(UPSTREAMS.names())
    if not sep or not kind or not url.strip():
        raise InvalidParameter(
            f"upstream {spec!r} must be KIND=URL, e.g. gpt-sovits=http://127.0.0.1:9880; "
            f"kinds: {kinds}")
    if UPSTREAMS.find(kind) is None:
        raise InvalidParameter(f"unknown upstream kind {kind!r}; kinds: {kinds}")
    return kind, check_url(url.strip())


def upstream_class(kind: str) -> type[UpstreamEngine]:
    """The engine class of upstream ``kind``."""
    unknown = f"unknown upstream kind {kind!r}; kinds: "
    return cast(type[UpstreamEngine], UPSTREAMS.load(kind, lambda names: unknown + names))


def load_upstream(spec: str, **options: Any) -> Engine:
    """Return the engine for ``KIND=URL``; ``options`` go to its constructor.

    Common options: ``revision`` (a label for the model behind the URL — change
    it when you change the model), ``timeout``, ``retries``. Kind-specific ones
    are documented on each engine class.
    """
    kind, url = parse_upstream(spec)
    engine_class = upstream_class(kind)
    accepted = accepted_options(engine_class) - {"url"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise InvalidParameter(
            f"upstream {kind!r} takes no option(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(accepted))}")
    return engine_class(url, **options)
