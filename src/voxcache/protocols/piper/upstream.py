"""Piper's own HTTP server (``python -m piper.http_server -m VOICE.onnx``) as an upstream.

``POST /synthesize`` (JSON) answers a whole WAV; ``GET /info`` and ``GET /voices`` describe the
voices. The server fills omitted settings from flags the gateway cannot see, so every declared
parameter is sent explicitly and the key says exactly what was asked; the defaults are the default
voice's config (read from ``/voices`` at start, hashed into the revision). ``--sentence-silence``
and the .onnx weights are not reported: set ``revision`` when they change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import blake3

from ...audio import Audio
from ...errors import UpstreamError
from ...params import ParamSpec
from ...request import ResolvedRequest
from ...upstream.base import UpstreamEngine
from ...upstream.decode import wav_stream


class PiperHttpEngine(UpstreamEngine):
    """Renders misses on a running Piper HTTP server."""

    kind = "piper-http"
    probe_path = "/info"
    supports_reference = False
    supports_instruct = False
    supports_seed = False

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        info = self.client.get_json("/info")
        configs = self.client.get_json("/voices")
        self.documents: dict[str, dict[str, Any]] = {"info": {**info, "last": None},
                                                     "voices": configs}
        """``/info`` and ``/voices`` as read at start: answered by the gateway's own Piper
        routes while the server is unreachable."""
        voice = info["voice"]
        name = voice["name"]
        config = configs.get(name, {})
        self.speaker_ids = {str(k): int(v) for k, v in
                            (config.get("speaker_id_map") or {}).items()}
        """Speaker names of a multi-speaker voice (Piper's ``speaker`` field)."""
        self.voices = {v: v for v in configs} | {name: name}
        self.default_voice = name
        espeak = str(voice.get("language") or "en-us").lower().replace("_", "-")
        self.languages = (espeak,)
        self.default_language = espeak
        self.sample_rate = int(config.get("audio", {}).get("sample_rate", 22050))
        self.params = _params(config.get("inference", {}), int(voice.get("num_speakers", 1)))
        config_hash = blake3.blake3(
            json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        self.model_revision = self.identity(f"voice={name}", f"config={config_hash}")

    def piper_document(self, name: str) -> dict[str, Any]:
        """The server's ``/info`` or ``/voices`` now (its exact document, "last" included),
        or, while it cannot be reached, the one read at start."""
        try:
            document = self.client.get_json(f"/{name}")
        except UpstreamError as exc:
            if exc.upstream_status is not None:
                raise
            return self.documents[name]
        if not isinstance(document, dict):
            raise UpstreamError(f"upstream {self.url}/{name} answered {type(document).__name__}"
                                ", not a JSON object")
        return document

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Ask the server for the take; it answers one WAV once every sentence is done."""
        self.refuse_unhonoured(request)
        p = request.params
        body = {
            "text": request.text,
            "voice": request.voice,
            "speaker_id": p["speaker_id"],
            "length_scale": p["length_scale"] / request.speed,
            "noise_scale": p["noise_scale"],
            "noise_w_scale": p["noise_w_scale"],
        }
        with self.client.stream("POST", "/synthesize", json=body) as chunks:
            yield from wav_stream(chunks)


def _params(inference: dict[str, Any], speakers: int) -> dict[str, ParamSpec]:
    """Piper's synthesis settings, defaulting to the voice config's values."""
    return {
        "length_scale": ParamSpec("length_scale", "float",
                                  float(inference.get("length_scale", 1.0)),
                                  minimum=0.1, maximum=5.0, doc="phoneme length; speed divides it"),
        "noise_scale": ParamSpec("noise_scale", "float",
                                 float(inference.get("noise_scale", 0.667)),
                                 minimum=0.0, maximum=2.0, doc="generator noise"),
        "noise_w_scale": ParamSpec("noise_w_scale", "float",
                                   float(inference.get("noise_w", 0.8)),
                                   minimum=0.0, maximum=2.0, doc="phoneme width noise"),
        "speaker_id": ParamSpec("speaker_id", "int", 0, minimum=0,
                                maximum=max(0, speakers - 1), doc="speaker index"),
    }
