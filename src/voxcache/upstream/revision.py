"""The revision in force: what an upstream renders with now, kept in the cache folder.

A switch proxied through the gateway (GPT-SoVITS ``/set_gpt_weights``) is recorded in
``upstreams/<kind>-<url hash>.json`` and announced on the invalidation log, so every
process keys new requests with the new weights and never serves old takes as theirs. A
render holds a shared ``flock`` and checks the revision under it; a switch takes it
exclusively (behind a gate lock, so it is not starved); a render keyed just before a switch
is refused with 503. docs/operating/gateway.md, "Switching weights".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import blake3

from ..errors import CacheDirError, Overloaded
from ..fsmode import locked, private_dirs, write_private

if TYPE_CHECKING:
    from ..cache import Cache


class UpstreamEngine(Protocol):
    """What a switchboard needs of the upstream engine it keeps the revision of."""

    kind: str
    url: str
    id: str
    model_revision: str

    def put_in_force(self, in_force: Mapping[str, Any]) -> None:
        """Make ``in_force`` (what the switches loaded) part of the revision."""

log = logging.getLogger("voxcache.upstream")

STATE_FOLDER = "upstreams"
UNREADABLE = {"state": "unreadable"}
"""Put in force when the state file cannot be read: a revision no take was keyed with, so
nothing stored is served as this model's until a switch records what is loaded."""
POLL = 0.01


class RevisionChanged(Overloaded):
    """A render keyed with a revision that a switch has since replaced: the caller must send
    the request again (it is then keyed with the revision in force)."""


class Switchboard:
    """One upstream's switch state in one cache folder, shared by every process on it."""

    def __init__(self, cache: Cache, engine: UpstreamEngine) -> None:
        self.cache = cache
        self.engine = engine
        name = f"{engine.kind}-{blake3.blake3(engine.url.encode()).hexdigest()[:16]}"
        root = Path(cache.root)
        self.path = root / STATE_FOLDER / f"{name}.json"
        self.references_path = root / STATE_FOLDER / f"{name}-references.json"
        self._gate = root / "locks" / f"upstream-{name}-gate.lock"
        self._renders = root / "locks" / f"upstream-{name}-renders.lock"
        self._references_lock = root / "locks" / f"upstream-{name}-references.lock"
        self.state: dict[str, Any] = {}
        self._seen: tuple[int, int, int] | None = None
        self.refresh()
        cache.on_event("revision", self._announced)

    @property
    def known(self) -> bool:
        """Whether a proxied switch has recorded what the upstream runs."""
        return bool(self.state.get("in_force"))

    def refresh(self) -> None:
        """Re-read the state file if it changed, and put what it records in force."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            seen = None
            state: dict[str, Any] = {}
        else:
            seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if seen == self._seen:
                return
            state = self._read()
        self._seen = seen
        self.state = state
        self.engine.put_in_force(state.get("in_force") or {})

    def _read(self) -> dict[str, Any]:
        try:
            state = json.loads(self.path.read_bytes())
            if not isinstance(state, dict):
                raise ValueError("the state must be a JSON object")
            in_force = state.get("in_force", {})
            if not isinstance(in_force, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in in_force.items()):
                raise ValueError("in_force must map names to strings")
            return state
        except (OSError, ValueError) as exc:
            log.error("upstream switch state %s is unreadable (%s): serving under a revision "
                      "no stored take has until a switch records the weights in force",
                      self.path, exc)
            return {"in_force": dict(UNREADABLE)}

    def commit(self, state: Mapping[str, Any]) -> None:
        """Record ``state`` (its ``in_force`` names what renders now), put it in force here
        and tell the other processes. Called inside ``switching``; a folder that cannot take
        the record is a ``CacheDirError``."""
        document = {**state, "kind": self.engine.kind, "url": self.engine.url,
                    "changed_at": time.time()}
        try:
            private_dirs(self.path.parent)
            write_private(self.path, json.dumps(document, sort_keys=True, indent=1).encode())
        except OSError as exc:
            raise CacheDirError(f"cannot record the upstream's switch state in the cache "
                                f"folder ({exc.strerror or exc})") from None
        self._seen = None
        self.refresh()
        self.cache.announce("revision", self.engine.id)

    def _announced(self, _engine_id: str) -> None:
        self.refresh()

    @contextlib.contextmanager
    def rendering(self, revision: str) -> Iterator[None]:
        """Hold off switches while a render keyed with ``revision`` runs; refuse it if a
        switch has replaced that revision already.

        Fails open: on a cache folder where the lock file cannot be made (full, read-only)
        the render runs unfenced — no switch can run there either, since a switch must
        record itself in that folder before it is sent."""
        with contextlib.ExitStack() as held:
            try:
                with _flock(self._gate, fcntl.LOCK_SH):
                    pass  # a waiting switch holds the gate: new renders queue behind it
                held.enter_context(_flock(self._renders, fcntl.LOCK_SH))
            except OSError as exc:
                log.warning("rendering without the switch fence: %s", exc)
            self.refresh()
            if revision != self.engine.model_revision:
                raise RevisionChanged(
                    f"the upstream's weights were switched after this request was keyed "
                    f"({self.engine.kind}); send it again to have it rendered by the weights "
                    "now in force", retry_after=0)
            yield

    @contextlib.contextmanager
    def switching(self, wait: float) -> Iterator[dict[str, Any]]:
        """Run a switch alone: no render in flight on this folder, none starting, until the
        block ends. Yields a copy of the current state to edit and ``commit``."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(_flock(self._gate, fcntl.LOCK_EX, wait))
                held.enter_context(_flock(self._renders, fcntl.LOCK_EX, wait))
            except OSError as exc:
                raise CacheDirError(f"cannot lock the cache folder for a switch "
                                    f"({exc.strerror or exc})") from None
            self._seen = None
            self.refresh()
            yield json.loads(json.dumps(self.state))

    @contextlib.contextmanager
    def references(self) -> Iterator[dict[str, str] | None]:
        """The record of which content the upstream last loaded for each reference path,
        held exclusively: edits made in the block are written back. None when the record
        cannot be kept (a full or read-only cache folder): then load every path again."""
        with contextlib.ExitStack() as held:
            loaded = self._open_references(held)
            if loaded is None:
                yield None
                return
            before = dict(loaded)
            yield loaded
            if loaded != before:
                self._write_references(loaded)

    def _open_references(self, held: contextlib.ExitStack) -> dict[str, str] | None:
        folder = self.references_path.parent
        try:
            private_dirs(folder)
            held.enter_context(_flock(self._references_lock, fcntl.LOCK_EX))
            if not os.access(folder, os.W_OK):
                return None  # a record that cannot follow the upstream must not be trusted
            loaded = json.loads(self.references_path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else {}

    def _write_references(self, loaded: dict[str, str]) -> None:
        try:
            write_private(self.references_path, json.dumps(loaded).encode())
        except OSError as exc:  # an out-of-date record would skip a needed reload: drop it
            log.warning("cannot keep the upstream's reference record (%s): every path will "
                        "be loaded again", exc)
            with contextlib.suppress(OSError):
                os.unlink(self.references_path)

    def forget_references(self, *, keep: Collection[str] = (),
                          mark: Mapping[str, str] | None = None) -> None:
        """The upstream dropped (or must rebuild) its prompt cache: load every path again.
        ``keep``: entries it still holds as recorded; ``mark``: entries to set."""
        with self.references() as loaded:
            if loaded is not None:
                kept = {name: loaded[name] for name in keep if name in loaded}
                loaded.clear()
                loaded.update(kept | dict(mark or {}))


@contextlib.contextmanager
def _flock(path: Path, operation: int, wait: float | None = None) -> Iterator[None]:
    """``flock`` a lock file; with ``wait`` give up after that many seconds (503)."""
    held = contextlib.ExitStack()
    try:
        held.enter_context(locked(path, operation, wait, POLL))
    except TimeoutError:
        raise Overloaded("renders in flight on the upstream did not finish within "
                         f"{wait:g} s; try the switch again", retry_after=5) from None
    with held:
        yield
