"""What the service derives from uploaded voices: speaker embeddings, comparisons, purges.

An uploaded clip's speaker embedding is derived once and kept in the stage cache by the
clip's content (a re-encoded or renamed clip is a hit; a private voice keeps its embedding).
The encoder loads once per process, on the first miss, and runs in a miss thread holding a
render slot, never on the loop. ``purge_voice`` removes everything derived from a tenant's
clip — takes, encodings, embeddings, prompts, token takes, sessions — through
``Cache.delete``. docs/operating/service.md, "Voices".
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..cache import Cache
from ..errors import BadReferenceAudio, CacheDirError, MissingDependency
from ..scheduling import Admission
from ..stages import Clip, StageCache, StageInputs, StageResult, voice_anchor
from ..stages.embeddings import (
    INSTALL_HINT,
    SAME_SPEAKER_THRESHOLD,
    SpeakerEmbeddings,
    SpeakerEncoder,
    cosine,
)
from ..stages.keys import DEFAULT_TENANT
from ..tiers.index import IndexRow
from .errors import VoiceClipDropped
from .voices import Voice, VoiceStore

T = TypeVar("T")
VOICE_TAG_DIGITS = 16
"""Digits of the clip's fingerprint a take's index row records as its voice (``resolved``)."""

_encoder: SpeakerEncoder | None = None
_encoder_lock = threading.Lock()


def shared_encoder() -> SpeakerEncoder:
    """This process's one resemblyzer encoder, loaded and warmed on first use (every app
    and worker thread shares it; it serialises its own calls)."""
    global _encoder
    with _encoder_lock:
        if _encoder is None:
            _encoder = _warmed(SpeakerEncoder())
        return _encoder


def _warmed(encoder: SpeakerEncoder) -> SpeakerEncoder:
    """Run the preprocessing once on a second of tone: librosa compiles its numba kernels on
    the first call (~3 s here), and that belongs to loading, not to the first voice's
    extraction time (which every later hit counts as saved)."""
    rate = 16000
    tone = 0.1 * np.sin(2 * np.pi * 220 * np.arange(rate) / rate)
    with contextlib.suppress(BadReferenceAudio):  # a tone holds no speech: that is expected
        encoder.embed(tone.astype(np.float32), rate)
    return encoder


class AdmittedEmbeddings(SpeakerEmbeddings):
    """``SpeakerEmbeddings`` with the process's shared encoder; an encode holds a render slot."""

    def __init__(self, stages: StageCache, admission: Admission) -> None:
        self.admission = admission
        super().__init__(stages)

    @property
    def encoder(self) -> SpeakerEncoder:
        return shared_encoder()

    def of(self, clip: bytes | Clip, tenant: str = DEFAULT_TENANT) -> StageResult:
        """A stored embedding without a slot (and without loading the encoder); else the
        encode in a render slot. The slot is taken and the encoder loaded *before* the stage
        times the extraction, so the time each later hit counts as saved is the encode alone,
        not a wait for a slot or a cold start."""
        clip = clip if isinstance(clip, Clip) else Clip.of(clip)
        if self._stored(clip, tenant):
            return super().of(clip, tenant)  # a damaged file found there is encoded here
        with self.admission.slot():
            shared_encoder()  # loaded here, outside the timed extraction
            return super().of(clip, tenant)

    def _stored(self, clip: Clip, tenant: str) -> bool:
        """Whether the embedding is held in memory or on disk (a peek: nothing is read,
        verified or counted). The inputs are the ones ``stage_cached`` keys
        ``SpeakerEmbeddings.embed`` by: no prompt text, language or parameters."""
        key = StageInputs("embedding", SpeakerEncoder.id, self.revision, clip.fingerprint,
                          tenant).key()
        cache = self.stages.cache
        return (cache.in_process.contains(key, "embedding")
                or cache.folder.contains(key, "embedding"))


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two embeddings measured against the documented threshold."""

    similarity: float
    same_speaker: bool
    threshold: float
    revision: str


class VoiceArtifacts:
    """Embeddings and purges of one service's uploaded voices (one per app)."""

    def __init__(self, cache: Cache, admission: Admission, timeout: float,
                 max_seconds: float) -> None:
        self.cache = cache
        self.max_seconds = max_seconds
        """The longest clip the service accepts (``max_upload_seconds``)."""
        self.stages = StageCache(cache)
        self.admission = admission
        self.timeout = timeout
        self._embeddings: SpeakerEmbeddings | None = None
        self._lock = threading.Lock()

    def embeddings(self) -> SpeakerEmbeddings:
        """The embedding stage; ``MissingDependency`` (with the pip command) without the
        ``[embeddings]`` extra — asked again each time, so installing it and restarting is
        all it takes."""
        with self._lock:
            if self._embeddings is None:
                self._embeddings = AdmittedEmbeddings(self.stages, self.admission)
            return self._embeddings

    # -- embeddings ------------------------------------------------------------------
    async def derive(self, tenant: str, clip: bytes | Clip) -> StageResult:
        """The clip's embedding: a hit, or the encoder in a miss thread and a render slot
        (``Overloaded`` past the render queue; ``TimeoutError`` after the request timeout)."""
        def run() -> StageResult:
            given = clip if isinstance(clip, Clip) else Clip.of(clip, self.max_seconds)
            return self.embeddings().of(given, tenant)

        return await self._in_thread(run)

    async def upload_status(self, store: VoiceStore, voice: Voice, clip: bytes
                            ) -> tuple[Voice, dict[str, Any]]:
        """Derive an uploaded voice's embedding and record its key; what the upload answers
        about it. Only an overload is an error: the extra missing or a clip without enough
        speech leave the voice usable, and the answer says why there is no embedding."""
        try:
            result = await self.derive(voice.tenant, clip)
        except MissingDependency as exc:
            return voice, {"status": "unavailable", "reason": str(exc), "install": INSTALL_HINT}
        except BadReferenceAudio as exc:  # too little speech for an embedding
            return voice, {"status": "refused", "reason": str(exc)}
        recorded = await self.admission.read(store.set_embedding, voice.tenant, voice.id,
                                             result.key)
        return recorded or voice, _described(result)

    async def of_voice(self, store: VoiceStore, voice: Voice, *, current: bool = False
                       ) -> StageResult:
        """A voice's embedding: the recorded one if the cache still holds it (no clip read,
        no encoder), else derived again from the kept clip and recorded. ``current``: one
        made by an older encoder revision is derived again too, when the clip is kept (a
        comparison needs both sides from one encoder). A private voice whose embedding is
        gone (purged, evicted) is ``VoiceClipDropped``: its clip was never kept, so only a
        new upload can bring it back."""
        found = None
        if voice.embedding:
            found = await self.admission.read(self.stages.lookup, voice.embedding,
                                              voice.tenant, "embedding")
        if found is not None and not (current and self._outdated(found)):
            return found
        clip = await self.admission.read(store.clip, voice.tenant, voice.id)
        if clip is None:
            if found is not None:
                return found
            raise VoiceClipDropped(
                f"voice {voice.id!r} was uploaded in privacy mode and its speaker embedding is "
                "no longer stored (purged or evicted); its clip was never kept: upload the "
                "clip again")
        result = await self.derive(voice.tenant, clip)
        await self.admission.read(store.set_embedding, voice.tenant, voice.id, result.key)
        return result

    def _outdated(self, result: StageResult) -> bool:
        """Made by another encoder revision than the installed one (never, without one)."""
        try:
            return revision_of(result) != self.embeddings().revision
        except MissingDependency:
            return False

    @staticmethod
    def compare(a: StageResult, b: StageResult) -> Comparison:
        """Cosine similarity of two embeddings and the threshold's verdict; embeddings of two
        encoder revisions are not comparable (``VoiceClipDropped`` names the way out)."""
        revisions = {revision_of(a), revision_of(b)}
        if len(revisions) > 1:
            raise VoiceClipDropped(
                f"these embeddings come from two encoder revisions ({', '.join(sorted(revisions))})"
                " and cannot be compared; upload the private voice's clip again to derive it "
                "with the encoder in use")
        score = cosine(a.artifact["embedding"], b.artifact["embedding"])
        return Comparison(round(score, 6), score >= SAME_SPEAKER_THRESHOLD,
                          SAME_SPEAKER_THRESHOLD, revisions.pop())

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        future = self.admission.submit(fn)
        return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout)

    # -- purge -----------------------------------------------------------------------
    def purge(self, tenant: str, fingerprint: str) -> dict[str, int]:
        """Remove every artifact derived from a tenant's clip, here and in every other
        process; how many of each kind were removed."""
        return purge_voice(self.stages, tenant, fingerprint)


def revision_of(result: StageResult) -> str:
    """The encoder revision an embedding was made with (recorded in its envelope)."""
    return str(result.entry.header.meta.get("model", ""))


def _described(result: StageResult) -> dict[str, Any]:
    return {"status": "ready", "key": result.key, "cache": result.cache,
            "dimensions": int(result.artifact["embedding"].size), "revision": revision_of(result)}


def derived_rows(cache: Cache, tenant: str, fingerprint: str) -> list[IndexRow]:
    """Index rows of everything stored that derives from one tenant's clip: takes rendered
    with it and their encodings (voice = the fingerprint's first 16 digits), and the stage
    artifacts naming its voice anchor as parent. ``CacheDirError`` when the index cannot
    answer: a purge that cannot see what to remove must not report success."""
    try:
        return cache.index.rows(
            "(tenant = ? AND voice = ?) OR parent = ?",
            (tenant, fingerprint[:VOICE_TAG_DIGITS], voice_anchor(tenant, fingerprint)),
            order="kind, key")
    except sqlite3.Error as exc:
        raise CacheDirError(f"the cache index cannot be read now ({exc}); nothing was purged: "
                            "retry in a moment") from None


def memory_only(stages: StageCache, tenant: str, fingerprint: str) -> list[tuple[str, str]]:
    """(key, kind) of the memory-only artifacts (sessions) this process holds for a clip."""
    return [(key, kind) for key, kind in stages.voice_artifacts(tenant, fingerprint)
            if kind == "session"]


def purge_voice(stages: StageCache, tenant: str, fingerprint: str) -> dict[str, int]:
    """Delete every artifact derived from one tenant's clip from every tier; the voice anchor
    goes last, which tells every other process to drop what it holds in memory from that
    clip (sessions included). Returns the count removed per kind."""
    cache = stages.cache
    removed: Counter[str] = Counter(kind for _, kind in memory_only(stages, tenant, fingerprint))
    for row in derived_rows(cache, tenant, fingerprint):
        cache.delete(row.key, row.kind)  # False for an encoding its take's delete took along
        removed[row.kind] += 1
    stages.purge_voice(tenant, fingerprint)
    return dict(sorted(removed.items()))
