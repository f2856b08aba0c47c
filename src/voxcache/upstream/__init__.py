"""The caching gateway's upstreams: engines that render misses on a running TTS server.

``voxcache serve --upstream KIND=URL`` puts the cache in front of a server that
already exists; clients keep their protocol and each distinct request reaches
the server once. Kinds:

- ``gpt-sovits``: GPT-SoVITS ``api_v2.py`` (``POST /tts``)
- ``cosyvoice``: CosyVoice's FastAPI server (``/inference_*``, raw PCM)
- ``openai``: any OpenAI-compatible ``/v1/audio/speech`` server
- ``piper-http``: Piper's own server (``python -m piper.http_server``)
- ``voxcache``: a central voxcache — this node becomes its edge (``upstream.voxcache``)

Each module is imported only when its kind is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..engine import Engine, accepted_options
from ..errors import InvalidParameter
from .base import UpstreamEngine, check_url

KINDS = {
    "gpt-sovits": ("gpt_sovits", "GptSovitsEngine"),
    "cosyvoice": ("cosyvoice", "CosyVoiceEngine"),
    "openai": ("openai", "OpenAISpeechEngine"),
    "piper-http": ("piper_http", "PiperHttpEngine"),
    "voxcache": ("voxcache", "VoxcacheEdgeEngine"),  # edge nodes (issue 14)
}

__all__ = ["KINDS", "UpstreamEngine", "load_upstream", "parse_upstream"]


def parse_upstream(spec: str) -> tuple[str, str]:
    """Split ``KIND=URL`` and check both parts, with errors that show a correct spelling."""
    kind, sep, url = (spec or "").partition("=")
    kind = kind.strip().lower()
    if not sep or not kind or not url.strip():
        raise InvalidParameter(
            f"upstream {spec!r} must be KIND=URL, e.g. gpt-sovits=http://127.0.0.1:9880; "
            f"kinds: {', '.join(KINDS)}")
    if kind not in KINDS:
        raise InvalidParameter(
            f"unknown upstream kind {kind!r}; kinds: {', '.join(KINDS)}")
    return kind, check_url(url.strip())


def load_upstream(spec: str, **options: Any) -> Engine:
    """Return the engine for ``KIND=URL``; ``options`` go to its constructor.

    Common options: ``revision`` (a label for the model behind the URL — change
    it when you change the model), ``timeout``, ``retries``. Kind-specific ones
    are documented on each engine class.
    """
    kind, url = parse_upstream(spec)
    module_name, class_name = KINDS[kind]
    engine_class = getattr(importlib.import_module(f".{module_name}", __name__), class_name)
    accepted = accepted_options(engine_class) - {"url"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise InvalidParameter(
            f"upstream {kind!r} takes no option(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(accepted))}")
    return engine_class(url, **options)
