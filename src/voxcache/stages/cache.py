"""A cache for any function of a reference clip: embeddings, prompts, token takes, state.

``StageCache.get_or_compute(inputs, compute)`` reads top-down like the audio path: the key
from ``StageInputs``; the fastest tier holding it, verified and of the caller's tenant; else
the load-once path (``voxcache.loading``: flight, lock and lease, look again, extract once);
the artifact published as safetensors with its measured cost, so hits count time saved.
``session`` artifacts stay in memory only and go first. docs/internals/stages.md.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..cache import Cache
from ..entry import Entry
from ..loading import Loader, Made, loader_of
from ..outcome import Progress
from ..singleflight import FlightGroup
from ..tensors import as_numpy, load_tensors, tensor_entry
from .clip import Clip
from .keys import ANCHOR_KIND, DEFAULT_TENANT, StageInputs, voice_anchor

DEFAULT_LOCK_WAIT = 120.0
MEMORY_ONLY_KINDS = frozenset({"session"})
STAGE_KINDS = ("embedding", "prompt", "tokens", "session")
_COUNTERS = ("hits", "misses", "joins", "bytes", "saved_us", "compute_us")


@dataclass(frozen=True, slots=True)
class Artifact:
    """What a stage produces: named arrays, plus small JSON fields (a normalised text, a
    sample rate) kept in the verified envelope beside them."""

    tensors: Mapping[str, np.ndarray]
    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: Any, default_name: str) -> Artifact:
        """Accept what an extractor naturally returns: an ``Artifact``, a mapping of
        arrays (numpy or torch), or one array (stored under ``default_name``)."""
        if isinstance(value, Artifact):
            return cls({k: as_numpy(v) for k, v in value.tensors.items()}, dict(value.fields))
        if isinstance(value, Mapping):
            return cls({str(k): as_numpy(v) for k, v in value.items()})
        return cls({default_name: as_numpy(value)})

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]


@dataclass(frozen=True, slots=True)
class StageResult:
    """An artifact and how it was served."""

    artifact: Artifact
    key: str
    cache: str
    """``hit``, ``miss`` or ``joined`` (another caller's extraction was shared)."""
    tier: str
    """``memory``, ``disk`` (or a shared tier's name) or ``extractor``."""
    seconds: float
    entry: Entry
    """The stored form: ``entry.blob`` is a standard safetensors file."""

    @property
    def compute_seconds(self) -> float:
        """What the extractor took when it made this artifact (a hit saved this much)."""
        return float(self.entry.header.meta.get("compute_seconds", 0.0))


class StageCache:
    """Stage artifacts in a ``Cache``'s tiers: keyed by content, shared, single-flight."""

    def __init__(self, cache: Cache, *, lock_wait: float = DEFAULT_LOCK_WAIT,
                 ttl: float | None = None) -> None:
        self.cache = cache
        self.lock_wait = lock_wait
        self.loader: Loader = loader_of(cache)
        self.ttl = ttl
        self._counts: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self._sessions: dict[str, set[str]] = {}
        """Voice anchor → keys of memory-only artifacts derived from it (for listing)."""

    @property
    def flights(self) -> FlightGroup:
        """The flights in progress, by key (shared with the takes of this cache)."""
        return self.loader.flights

    # -- the path ------------------------------------------------------------------
    def get_or_compute(self, inputs: StageInputs, compute: Callable[[], Any],
                       *, ttl: float | None = None) -> StageResult:
        """The artifact for ``inputs``; ``compute()`` runs only if no tier has it (and no
        other caller, here, in another process or on another node, is computing it)."""
        recipe = _Artifact(self, inputs, compute, ttl)
        result, how = self.loader.load(inputs.key(), inputs.kind, recipe, wait=self.lock_wait,
                                       private=inputs.kind in MEMORY_ONLY_KINDS)
        if how == "joined":
            self._count(inputs.kind, joins=1)
            result = replace(result, cache="joined",
                             seconds=time.perf_counter() - recipe.started)
        elif how == "made" and inputs.kind in MEMORY_ONLY_KINDS:
            self._remember_session(inputs, result.entry)
        return result

    def put(self, inputs: StageInputs, value: Any, *, compute_seconds: float = 0.0,
            ttl: float | None = None) -> StageResult:
        """Store an artifact made outside ``get_or_compute`` (decoder state after a turn);
        ``compute_seconds`` is what a later hit saves."""
        artifact = Artifact.of(value, inputs.kind)
        key = inputs.key()
        entry = tensor_entry(key, inputs.kind, artifact.tensors,
                             ttl=ttl if ttl is not None else self.ttl,
                             meta=_meta(inputs, artifact, compute_seconds))
        self._store(entry, inputs)
        self._count(inputs.kind, bytes=entry.size)
        return StageResult(artifact, key, "miss", "extractor", 0.0, entry)

    def lookup(self, key: str, tenant: str, kind: str) -> StageResult | None:
        """A stored artifact by key, for its own tenant only.

        Another tenant's key reads exactly like an absent one, at the same cost
        (``Cache.get_owned``: one memory peek and one index lookup either way, no file
        read, no recency or hit counted), so a probe learns nothing.
        """
        started = time.perf_counter()
        if kind in MEMORY_ONLY_KINDS:
            held = self.cache.in_process.peek(key, kind)
            if held is None or _tenant_of(held) != tenant:
                return None
            found: tuple[Entry, str] | None = (held, self.cache.in_process.name)
        else:
            found = self.cache.get_owned(key, tenant, kind)
        if found is None or found[0].header.kind != kind:
            self._count(kind, misses=1)
            return None
        return self._hit(found, key, kind, started)

    def _hit(self, found: tuple[Entry, str], key: str, kind: str,
             started: float) -> StageResult:
        entry, tier = found
        saved_us = int(float(entry.header.meta.get("compute_seconds", 0.0)) * 1e6)
        self._count(kind, hits=1, saved_us=saved_us)
        return StageResult(_artifact_of(entry), key, "hit", tier,
                           time.perf_counter() - started, entry)

    def _store(self, entry: Entry, inputs: StageInputs) -> None:
        if inputs.kind in MEMORY_ONLY_KINDS:
            self.cache.in_process.replace(entry, tenant=inputs.tenant)
            self._remember_session(inputs, entry)
        else:
            self.cache.put(entry, tenant=inputs.tenant)

    def _remember_session(self, inputs: StageInputs, entry: Entry) -> None:
        if inputs.anchor:
            with self._count_lock:
                self._sessions.setdefault(inputs.anchor, set()).add(entry.header.key)

    # -- voices --------------------------------------------------------------------
    def voice_artifacts(self, tenant: str, fingerprint: str) -> list[tuple[str, str]]:
        """(key, kind) of every stored artifact derived from one tenant's voice."""
        anchor = voice_anchor(tenant, fingerprint)
        stored = set(self.cache.folder.children(anchor))
        with self._count_lock:
            live = {k for k in self._sessions.get(anchor, ())
                    if self.cache.in_process.contains(k, "session")}
        stored |= {(k, "session") for k in live}
        return sorted(stored)

    def purge_voice(self, tenant: str, fingerprint: str) -> int:
        """Remove every artifact derived from one tenant's voice from every tier (and,
        through the invalidation log, from other processes' memory); return how many."""
        anchor = voice_anchor(tenant, fingerprint)
        found = self.voice_artifacts(tenant, fingerprint)
        self.cache.delete(anchor, ANCHOR_KIND)  # the anchor's children go with it
        with self._count_lock:
            self._sessions.pop(anchor, None)
        return len(found)

    # -- counters ------------------------------------------------------------------
    def _count(self, kind: str, **deltas: int) -> None:
        with self._count_lock:
            for name, delta in deltas.items():
                counter = f"stage_{kind}_{name}"
                self._counts[counter] = self._counts.get(counter, 0) + delta
        for name, delta in deltas.items():
            if delta:
                self.cache.count(f"stage_{kind}_{name}", delta)

    def stats(self) -> dict[str, dict[str, int]]:
        """Hits, misses, joins, bytes written, time saved and extractor time per kind,
        in this process since start (the persisted totals are in ``Cache.stats()``)."""
        with self._count_lock:
            return {kind: {name: self._counts.get(f"stage_{kind}_{name}", 0)
                           for name in _COUNTERS} for kind in STAGE_KINDS}


class _Artifact:
    """What a stage artifact is made of, for the load-once path (``loading.Recipe``)."""

    def __init__(self, stages: StageCache, inputs: StageInputs, compute: Callable[[], Any],
                 ttl: float | None) -> None:
        self.stages = stages
        self.inputs = inputs
        self.compute = compute
        self.ttl = ttl
        self.started = time.perf_counter()

    def found(self, entry: Entry, tier: str, inside_lock: bool) -> StageResult | None:
        # The key holds the tenant, so this never differs for entries voxcache wrote; it
        # is the second wall, for a file planted under another tenant's key.
        inputs = self.inputs
        if not self._belongs(entry):
            return None
        if inside_lock:
            self.stages._count(inputs.kind, joins=1)
            return StageResult(_artifact_of(entry), entry.header.key, "joined", tier,
                               time.perf_counter() - self.started, entry)
        return self.stages._hit((entry, tier), entry.header.key, inputs.kind, self.started)

    def make(self, sink: Progress) -> Made[StageResult]:
        inputs, stages = self.inputs, self.stages
        began = time.perf_counter()
        artifact = Artifact.of(self.compute(), inputs.kind)
        seconds = time.perf_counter() - began
        entry = tensor_entry(inputs.key(), inputs.kind, artifact.tensors,
                             ttl=self.ttl if self.ttl is not None else stages.ttl,
                             meta=_meta(inputs, artifact, seconds))
        stages._count(inputs.kind, misses=1, bytes=entry.size, compute_us=int(seconds * 1e6))
        result = StageResult(artifact, entry.header.key, "miss", "extractor",
                             time.perf_counter() - self.started, entry)
        return Made(result, entry, inputs.tenant)

    def admit(self, made: Made[StageResult]) -> Made[StageResult]:
        return made  # stage artifacts are not takes: the storing gate is for takes

    def published(self, made: StageResult, held: Entry | None) -> StageResult:
        if held is None or held is made.entry or held.blob == made.entry.blob or (
                not self._belongs(held)):  # never another tenant's
            return made
        return replace(made, artifact=_artifact_of(held), entry=held)  # published first

    def _belongs(self, entry: Entry) -> bool:
        return entry.header.kind == self.inputs.kind and _tenant_of(entry) == self.inputs.tenant

    def joined(self, value: StageResult, sink: Progress, replayed: int) -> StageResult:
        return value


def stage_cached(stages: StageCache, *, kind: str, extractor: str, revision: str,
                 ) -> Callable[[Callable[..., Any]], Callable[..., StageResult]]:
    """Cache ``fn(clip: Clip, **params)`` by the clip's content and every input.

        @stage_cached(stages, kind="embedding", extractor="my-ecapa", revision="v2.1")
        def embed(clip: Clip) -> np.ndarray: ...

        embed(wav_bytes, tenant="acme").artifact["embedding"]

    The wrapper takes the clip's file bytes (or a ``Clip``) and keyword-only
    ``tenant``, ``prompt_text``, ``language`` and the function's own parameters (JSON
    scalars; defaults filled in, so an explicit default shares the entry). The
    function receives ``prompt_text``/``language`` only if its signature names them.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., StageResult]:
        signature = inspect.signature(fn)
        own = {name: p.default for name, p in list(signature.parameters.items())[1:]
               if name not in ("prompt_text", "language")}
        wants_text = {n for n in ("prompt_text", "language") if n in signature.parameters}

        @functools.wraps(fn)
        def wrapper(clip: bytes | Clip, *, tenant: str = DEFAULT_TENANT, prompt_text: str = "",
                    language: str = "", **params: Any) -> StageResult:
            unknown = set(params) - set(own)
            if unknown:
                raise TypeError(f"{fn.__name__}() takes no parameter {sorted(unknown)[0]!r}")
            resolved = {name: params.get(name, default) for name, default in own.items()}
            clip = clip if isinstance(clip, Clip) else Clip.of(clip)
            inputs = StageInputs(kind, extractor, revision, clip.fingerprint, tenant,
                                 prompt_text, language, resolved)
            extra = {"prompt_text": prompt_text, "language": language}
            call_with = {**resolved, **{n: extra[n] for n in wants_text}}
            return stages.get_or_compute(inputs, lambda: fn(clip, **call_with))

        wrapper.stage_cache = stages  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _meta(inputs: StageInputs, artifact: Artifact, seconds: float) -> dict[str, Any]:
    """The envelope's description of an artifact: what it was made from (for `ls`,
    index rebuilds and purges) and what making it cost."""
    return {
        "tenant": inputs.tenant, "engine": inputs.extractor, "model": inputs.revision,
        "voice": inputs.reference[:16], "text": inputs.prompt_text[:200],
        "parent": inputs.anchor, "reference": inputs.reference,
        "inputs": inputs.payload(), "compute_seconds": round(seconds, 6),
        "fields": dict(artifact.fields),
    }


def _artifact_of(entry: Entry) -> Artifact:
    fields = entry.header.meta.get("fields") or {}
    return Artifact(load_tensors(entry), dict(fields))


def _tenant_of(entry: Entry) -> str:
    return str(entry.header.meta.get("tenant", ""))
