"""``--upstream voxcache=URL``: an edge node whose misses are answered by a central voxcache.

The edge mirrors its center's engine identity, so it keys a request exactly as the center
does; a miss asks the center by key, then for a render, and stores only envelopes it
verified under its own key. Offline (center unreachable) hits go on and a miss is a 503
with Retry-After (back-off 1 s → 30 s), or a local ``fallback`` engine keyed apart. The
edge sends its API key and is its center's tenant. docs/operating/edge.md, "The edge".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .. import identity as identities
from ..audio import Audio
from ..engines import load_engine
from ..errors import InvalidParameter, Overloaded, UpstreamError
from ..key import digest, key_payload
from ..request import ResolvedRequest
from .base import UpstreamEngine, headers_option, seconds_option
from .center import CenterClient, KeyMismatch, Unreachable
from .http import DEFAULT_READ_TIMEOUT

if TYPE_CHECKING:
    from ..cache import Cache

log = logging.getLogger("voxcache.edge")

FALLBACK_MARK = "+edge-fallback"
"""Appended to a fallback engine's model revision: its takes can never share a key with a
center's, even when the fallback runs the very same model."""
IDENTITY_CHECK_SECONDS = 60.0
"""How often (at most, and only on a miss) the edge asks whether the center's model moved."""
FIRST_BACKOFF, LONGEST_BACKOFF = 1.0, 30.0


class CenterUnreachable(Overloaded):
    """The center cannot be reached: a miss cannot be answered now (503 + Retry-After)."""


class CenterMoved(Overloaded):
    """The center's model revision changed after this request was keyed: send it again."""


class Offline:
    """The edge's view of its center: reachable, or offline until a time (then probed)."""

    def __init__(self) -> None:
        self._until = 0.0
        self._backoff = 0.0
        self._lock = threading.Lock()

    @property
    def offline(self) -> bool:
        """True while misses fail fast without asking the center."""
        return time.monotonic() < self._until

    def remaining(self) -> float:
        """Seconds until the next probe (at least 1, for Retry-After)."""
        return max(1.0, math.ceil(self._until - time.monotonic()))

    def trip(self) -> bool:
        """A call found the center unreachable: stay offline, longer each time in a row.
        True when the edge was online until now."""
        with self._lock:
            was_online = self._backoff == 0.0
            self._backoff = min(LONGEST_BACKOFF, self._backoff * 2 or FIRST_BACKOFF)
            self._until = time.monotonic() + self._backoff
            return was_online

    def reset(self) -> bool:
        """A call reached the center. True when the edge was offline until now."""
        with self._lock:
            was_offline = self._backoff != 0.0
            self._backoff = self._until = 0.0
            return was_offline


class VoxcacheEdgeEngine(UpstreamEngine):
    """An engine that is a central voxcache, mirrored (see the module docstring)."""

    kind = "voxcache"
    probe_path = "/healthz"
    cache: Cache | None = None

    def __init__(self, url: str, *, api_key: str | None = None, fallback: str | None = None,
                 connect_timeout: float = 2.0, retries: int = 1,
                 timeout: float = DEFAULT_READ_TIMEOUT, **options: Any) -> None:
        if options.get("revision"):
            raise InvalidParameter("--upstream-revision does not apply to an edge: it keys "
                                   "with its center's model revision")
        super().__init__(url, retries=retries, timeout=timeout, **options)
        headers = {**(headers_option(options.get("headers")) or {}),
                   "User-Agent": f"voxcache-edge/{_version()}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.center = CenterClient(
            self.url, headers, timeout=self.client.timeout, retries=self.client.retries,
            connect_timeout=seconds_option("connect_timeout", connect_timeout),
            max_answer_bytes=self.client.max_answer_bytes)
        self.state = Offline()
        self.fallback_engine = _fallback(fallback)
        self.center_tenant: str | None = None
        self.identity_source = "none"
        self.identity_doc: dict[str, Any] | None = None
        self._checked = 0.0
        self._drifted: str | None = None
        self._lock = threading.Lock()
        try:
            self._adopt(self._ask_identity(), "center")
        except Unreachable as exc:
            log.warning("edge: the center at %s is unreachable at start (%s); keying with the "
                        "identity recorded in the cache folder", self.url, exc)

    # -- identity --------------------------------------------------------------------
    def attach(self, cache: Cache) -> None:
        """Know the cache folder: record the center's identity there, or — if the center
        could not be asked at start — key with the identity recorded there. (No switchboard,
        unlike other upstreams: an edge proxies no weight switches; its revision is the
        center's, followed by ``_revisit_identity``.)"""
        self.cache = cache
        if self.identity_doc is not None:
            self._record()
            return
        record = identities.read_record(cache.root)
        if record is None:
            raise UpstreamError(
                f"the center at {self.url} is unreachable and the cache folder {cache.root} "
                "has no record of its identity (one is kept after any contact with the "
                "center, or an imported pack): start this edge once while the center is "
                "reachable, or `voxcache pack import` a pack from it first")
        identities.apply(self, record["identity"])
        self.identity_doc = dict(record["identity"])
        self.identity_source = "record"
        self._checked = 0.0  # ask the center again at the first miss

    def _ask_identity(self) -> dict[str, Any]:
        """The center's identity answer, its identity checked field by field."""
        answer = self.center.identity()
        try:
            identities.check(answer["identity"])
        except identities.BadIdentity as exc:
            raise UpstreamError(f"the center at {self.url} answered an unusable identity: "
                                f"{exc}") from None
        return answer

    def _adopt(self, answer: dict[str, Any], source: str) -> None:
        doc = answer["identity"]
        identities.apply(self, doc)
        self.identity_doc = dict(doc)
        self.identity_source = source
        tenant = answer.get("tenant")
        self.center_tenant = tenant if isinstance(tenant, str) else None
        self._checked = time.monotonic()

    def _record(self) -> None:
        if self.cache is None or self.identity_doc is None:
            return
        try:
            identities.write_record(self.cache.root, self.identity_doc, "center")
        except OSError as exc:
            log.warning("edge: could not record the center's identity: %s", exc)

    def _revisit_identity(self, request: ResolvedRequest) -> None:
        """On a miss, at most once a minute: has the center's model moved? A new revision is
        adopted (later requests key with it; this one, keyed before, is sent back: 503);
        anything else changed (parameters, voices) needs a restart to mirror safely."""
        if time.monotonic() - self._checked < IDENTITY_CHECK_SECONDS:
            return
        with self._lock:
            if time.monotonic() - self._checked < IDENTITY_CHECK_SECONDS:
                return
            answer = self._ask_identity()
            self._checked = time.monotonic()
            doc = answer["identity"]
            tenant = answer.get("tenant")
            self.center_tenant = tenant if isinstance(tenant, str) else None
            if doc == self.identity_doc:
                return
            self._follow(doc)
        if request.model_revision != self.model_revision:
            raise CenterMoved("the center switched to another model revision after this "
                              "request was keyed; send it again", retry_after=1)

    def _follow(self, doc: dict[str, Any]) -> None:
        """The center's identity changed: follow a new revision, refuse anything more."""
        old = dict(self.identity_doc or {})
        if {k: v for k, v in doc.items() if k != "model_revision"} != {
                k: v for k, v in old.items() if k != "model_revision"}:
            self._drifted = ("the center's engine changed beyond its model revision (its "
                             "parameters, voices or languages); restart this edge to mirror it")
            log.error("edge: %s", self._drifted)
            return
        log.warning("edge: the center's model revision moved from %s to %s; following it",
                    old.get("model_revision"), doc["model_revision"])
        self.model_revision = doc["model_revision"]
        self.identity_doc = dict(doc)
        self._record()

    # -- rendering -------------------------------------------------------------------
    @property
    def offline(self) -> bool:
        """True while the center is considered unreachable (misses fail fast or fall back)."""
        return self.state.offline

    def key_of(self, request: ResolvedRequest) -> str:
        """The request's key, computed exactly as the center computes it."""
        waveform = frozenset(n for n, s in self.params.items() if s.shapes_waveform)
        return digest(key_payload(request, waveform))

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """The center's take for the request: stored there already, or rendered there now."""
        self._check(request)
        key = self.key_of(request)
        if self.state.offline:
            self._count("edge_offline_misses")
            raise self._unreachable("offline since an earlier call failed")
        try:
            self._revisit_identity(request)
            entry = self.center.stored(key)
            source = "edge_center_hits"
            if entry is None:
                self.center.render(self._body(request), key)
                entry = self.center.stored(key)
                source = "edge_center_renders"
                if entry is None:
                    raise UpstreamError(
                        f"the center rendered {key[:12]} but holds no copy to fetch (is its "
                        "storage full?); the edge stores only takes it can verify")
        except Unreachable as exc:
            if self.state.trip():
                log.warning("edge: the center at %s is unreachable (%s): serving stored takes "
                            "only%s", self.url, exc, "; misses go to the fallback engine"
                            if self.fallback_engine is not None else "; misses get 503")
            self._count("edge_center_unreachable")
            raise self._unreachable(str(exc)) from None
        except KeyMismatch:
            self._checked = 0.0  # the center may have moved: ask now (CenterMoved if it did)
            self._revisit_identity(request)
            raise
        if self.state.reset():
            log.warning("edge: the center at %s answers again", self.url)
        self._count(source)
        yield entry.audio()

    def _check(self, request: ResolvedRequest) -> None:
        if self.identity_doc is None:
            raise UpstreamError(f"the edge does not know its center's identity yet ({self.url} "
                                "was unreachable at start)")
        if self._drifted:
            raise UpstreamError(self._drifted)
        if request.model_revision != self.model_revision:
            raise CenterMoved("the center's model revision changed after this request was "
                              "keyed; send it again", retry_after=1)
        if self.center_tenant is not None and request.tenant != self.center_tenant:
            raise UpstreamError(
                f"this edge's API key is tenant {self.center_tenant!r} at the center, so only "
                f"that tenant's requests can be keyed alike there; this one is tenant "
                f"{request.tenant!r}. Give the edge's clients keys of [tenants."
                f"{self.center_tenant}] here, or give the edge a key of the center's "
                f"[tenants.{request.tenant}]")

    def _unreachable(self, why: str) -> CenterUnreachable:
        return CenterUnreachable(
            f"the center at {self.url} is unreachable ({why}): stored takes are served, new "
            f"ones cannot be made until it is back; retry in {self.state.remaining():.0f} s",
            retry_after=self.state.remaining())

    @staticmethod
    def _body(request: ResolvedRequest) -> dict[str, Any]:
        """The native request the center resolves to the same key (every field canonical)."""
        import base64

        body: dict[str, Any] = {
            "text": request.text, "voice": request.voice, "language": request.language,
            "instruct": request.instruct, "seed": request.seed, "speed": request.speed,
            "params": dict(request.params), "ttl": request.ttl,
            "response_format": "pcm", "stream": False, "cache": "use"}
        if request.seed is None:
            body["seed_policy"] = "pin"  # the take stored under the request key itself
        if request.reference_audio is not None:
            body["reference_audio"] = base64.b64encode(request.reference_audio).decode()
            body["prompt_text"] = request.prompt_text
        return body

    def reachability(self, refresh: bool = True) -> list[dict[str, Any]]:
        """The center's state (``role: center``), and whether misses fail fast meanwhile."""
        state = self._reachability(self.center, refresh)
        state["offline"] = self.state.offline
        return [state]

    def stop_waiting(self, grace: float) -> None:
        """The service is stopping: cut off calls to the center still running ``grace``
        seconds from now."""
        super().stop_waiting(grace)
        self.center.stop(grace)

    def _count(self, name: str) -> None:
        if self.cache is not None:
            self.cache.count(name)

    def describe(self) -> dict[str, object]:
        """The mirrored engine, plus the edge's view of its center."""
        data = super().describe()
        data["edge"] = {"offline": self.state.offline, "identity_from": self.identity_source,
                        "center_tenant": self.center_tenant,
                        "fallback": None if self.fallback_engine is None else {
                            "id": self.fallback_engine.id,
                            "model_revision": self.fallback_engine.model_revision}}
        return data


def _fallback(name: str | None) -> Any:
    """The local engine that answers misses while the center is unreachable (its revision
    marked so none of its takes is keyed like a center's)."""
    if not name:
        return None
    engine = load_engine(name)
    engine.model_revision = f"{engine.model_revision}{FALLBACK_MARK}"
    return engine


def _version() -> str:
    try:
        return metadata.version("voxcache")
    except metadata.PackageNotFoundError:
        return "0"
