"""The engine protocol: what voxcache needs to know about a TTS engine.

An engine has an id, a model revision (part of every key, so a new model never
serves old audio), a sample rate, declared parameters, the voices it takes (names,
reference clips, tensors), what it promises (determinism, concurrent renders, how it
splits text), and ``render`` which yields canonical PCM one sentence at a time.
Capability flags let the request resolver refuse fields an engine would otherwise
silently ignore. ``voxcache.testing.engine_contract`` checks every promise;
docs/internals/extending.md says how to write one.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from .audio import Audio
from .errors import EngineError, VoxcacheError
from .params import ParamSpec
from .redact import redact
from .resolved import ResolvedRequest

DETERMINISM = ("deterministic", "seeded", "sampling")


@dataclass(frozen=True, slots=True)
class TensorVoice:
    """The tensor voices an engine takes: one array of this shape and dtype (a style vector,
    a speaker embedding). A voice is keyed by its content, so one value changed is another
    voice and another key."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def describe(self) -> dict[str, object]:
        return {"shape": list(self.shape), "dtype": self.dtype}


class Engine:
    """Base class for engines; subclasses set the attributes and implement ``render``."""

    id: str = "engine"
    model_revision: str = "unversioned"
    sample_rate: int = 22050
    params: ClassVar[Mapping[str, ParamSpec]] = {}
    languages: tuple[str, ...] = ("en",)
    default_language: str = "en"
    voices: Mapping[str, str] = {}
    """Accepted voice names (aliases included) → canonical voice name."""
    default_voice: str | None = None
    supports_reference: bool = False
    """True when the engine clones a voice from reference audio."""
    supports_instruct: bool = False
    supports_seed: bool = False
    """True when an explicit seed makes the engine's output reproducible."""
    streams_from_server: bool = False
    """True when ``render`` yields audio as a remote server sends it (a gateway's upstream
    that streams): the OpenAI route then sends a miss as it arrives, as OpenAI's own
    server streams its bodies, instead of after the last chunk."""
    segments_context_free: bool = True
    """False when a sentence's audio depends on neighbouring text; such an engine must
    also override ``segment_context`` or segment mode is refused for it."""
    determinism: str = "sampling"
    """What rendering one request twice gives: ``deterministic`` (the same samples),
    ``seeded`` (the same samples for the same explicit seed) or ``sampling`` (a new take each
    time: the seed policy decides what callers hear). Checked by the contract suite."""
    deterministic_params: Mapping[str, object] = {}
    """Parameter values under which a ``sampling`` engine renders the same samples every time
    (Piper: zero noise); the contract suite checks them."""
    concurrent_renders: bool = True
    """Whether ``render`` may run in several threads at once; False: voxcache runs this
    engine's renders one at a time."""
    tensor_voice: TensorVoice | None = None
    """The tensor voices the engine takes (None: none; a request with one is refused)."""
    speech: bool = True
    """Whether the engine renders speech: the quality gate holds a speech take's duration
    against its text and refuses long inner silence (``policies.admit.quality``); an engine
    of tones or effects (``tone``) gets the signal checks alone."""
    clause_safe: bool = False
    """True when a clause rendered alone (cut at ``, ; : —``) is the clause as the engine says
    it inside its sentence, give or take the pause and loudness voxcache sets at the join:
    ``segments = "clauses"`` is refused for an engine that does not declare it. The contract
    suite checks that a declared engine renders each clause as one chunk."""
    segment_gap: float = 0.0
    """Seconds of silence the engine puts between sentences (Piper: none). ``render``
    yields each sentence without it; voxcache adds it between consecutive chunks on
    every path (``joined``), so a whole render, a stream and a stitch of stored
    sentences are one PCM."""

    def split_sentences(self, text: str) -> list[str] | None:
        """Split ``text`` exactly as ``render`` does, one chunk per part, or None.

        None (the default) means "cannot promise the same split" and keeps the
        request whole: a wrong split would stitch audio the engine never makes.
        """
        return None

    def segment_context(self, segments: list[str], index: int) -> dict[str, object] | None:
        """The neighbouring text segment ``index`` is conditioned on (None: undeclared).

        Only consulted for engines that are not ``segments_context_free``; what it
        returns goes into the segment's key, so a sentence is reused only where its
        context is the same.
        """
        return None

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Yield the take one chunk (sentence) at a time, in order, without the pause
        between sentences (``segment_gap``: voxcache puts it there)."""
        raise NotImplementedError

    @property
    def voice_kinds(self) -> tuple[str, ...]:
        """The voices the engine takes: ``name`` (its own), ``clip`` (cloned from reference
        audio), ``tensor`` (an array: ``tensor_voice``)."""
        return tuple(kind for kind, takes in (("name", bool(self.voices) or not (
            self.supports_reference or self.tensor_voice)), ("clip", self.supports_reference),
            ("tensor", self.tensor_voice is not None)) if takes)

    def describe(self) -> dict[str, object]:
        """Return a JSON-friendly summary for logs, `explain` and the API."""
        return {
            "id": self.id,
            "model_revision": self.model_revision,
            "sample_rate": self.sample_rate,
            "voices": sorted(set(self.voices.values())),
            "voice_kinds": list(self.voice_kinds),
            **({"tensor_voice": self.tensor_voice.describe()} if self.tensor_voice else {}),
            "languages": list(self.languages),
            "determinism": self.determinism,
            "concurrent_renders": self.concurrent_renders,
            "speech": self.speech,
            "clause_safe": self.clause_safe,
            "params": [spec.describe() for spec in self.params.values()],
        }


def accepted_options(engine_class: type) -> set[str]:
    """Keyword options of an engine class's constructor (and of every base it forwards
    ``**options`` to): what config may set for it."""
    names: set[str] = set()
    for cls in engine_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def render_chunks(engine: Engine, request: ResolvedRequest) -> Iterator[Audio]:
    """Yield an engine's chunks, translating its own failures (and silence) into EngineError.

    The one boundary where an engine's foreign exceptions become voxcache errors: every
    render path goes through it, so a crashed model is a 5xx with the engine's message
    and never a half-built entry.
    """
    produced = False
    try:
        for chunk in engine.render(request):
            produced = True
            yield chunk
    except VoxcacheError:
        raise
    except Exception as exc:
        raise EngineError(f"engine {engine.id!r} failed: {redact(str(exc))}") from exc
    if not produced:
        raise EngineError(f"engine {engine.id!r} produced no audio")


class JoinRule:
    """An engine's join rule, applied to its sentences in order as a caller hears them:
    each after the first is preceded by ``gap`` seconds of silence. Every path that
    hands chunks out or builds a take from them goes through it, so ``Audio.join`` of
    what it returns is the take, whichever path made it."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self._started = False
        self._silence: Audio | None = None

    def __call__(self, part: Audio) -> Audio:
        """The next sentence as heard (its leading pause included)."""
        if not self._started or self.gap <= 0:
            self._started = True
            return part
        silence = self._silence
        if silence is None or silence.sample_rate != part.sample_rate:
            frames = round(self.gap * part.sample_rate)
            silence = self._silence = Audio(b"\0\0" * part.channels * frames,
                                            part.sample_rate, part.channels)
        return Audio.join([silence, part])


def joined(parts: Iterable[Audio], gap: float) -> Iterator[Audio]:
    """``parts`` as a caller hears them under the join rule (``JoinRule``)."""
    return map(JoinRule(gap), parts)
