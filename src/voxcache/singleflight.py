"""One render per key, however many ask: in-process flights and cross-process file locks.

A ``Flight`` is one load in progress: its leader says how it is served (``begin``), hands
over chunks (``chunk``), settles the value (``settle``) and lands the published one
(``land``, what later joiners get). Threads wait on a condition, coroutines on one future
per event loop. Across processes the leader holds a per-key ``flock`` (dropped by the
kernel when a process dies); every wait is bounded, and a waiter that gives up renders
itself — publication makes duplicates converge. docs/internals/design.md, "Load once".
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from .audio import Audio
from .fsmode import FILE_MODE, private_dirs

T = TypeVar("T")


_NOTHING: Any = object()
_NO_LOOPS: dict[Any, Any] = {}


class Flight(Generic[T]):
    """One load in progress: how it is served, its chunks so far, its value."""

    def __init__(self) -> None:
        self.chunks: list[Audio] = []
        self.how: tuple[str, str, tuple[int, int] | None] | None = None
        """What ``begin`` said: (cache, tier, segments)."""
        self.reason = ""
        """Why the value will not be stored, when ``begin`` knew it already."""
        self.followers = 0
        self._value: Any = _NOTHING
        """The value as soon as it exists (what callers waiting then get)."""
        self._published: Any = _NOTHING
        """The value as published (what a caller that joins after it existed gets)."""
        self._error: BaseException | None = None
        self._landing_error: BaseException | None = None
        self._version = 0
        """Changes so far (a coroutine that looked at the state waits for the next one)."""
        self._sleeping = 0
        """Threads waiting on the condition (a change with none skips the notify)."""
        self._cond = threading.Condition(threading.Lock())
        self._loops: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}

    # -- the leader's side (``outcome.Progress``) -------------------------------------
    def begin(self, cache: str, tier: str, segments: tuple[int, int] | None = None,
              reason: str = "") -> None:
        """How the value is being served, said once before its first chunk."""
        with self._cond:
            if self.how is None:
                self.reason = reason
                self.how = (cache, tier, segments)
            loops = self._bump()
        _wake(loops)

    def chunk(self, audio: Audio) -> None:
        """Make the next chunk visible to every follower."""
        with self._cond:
            self.chunks.append(audio)
            loops = self._bump()
        _wake(loops)

    def settle(self, value: T) -> None:
        """The value exists: everyone waiting has it now (unless already settled)."""
        with self._cond:
            if self._value is _NOTHING and self._error is None:
                self._value = value
            loops = self._bump()
        _wake(loops)

    def land(self, value: T) -> None:
        """The value is published (stored where it is the key's)."""
        with self._cond:
            if self._value is _NOTHING and self._error is None:
                self._value = value
            if self._published is _NOTHING and self._landing_error is None:
                self._published = value
            loops = self._bump()
        _wake(loops)

    def fail(self, exc: BaseException) -> None:
        """The load failed: every waiter still waiting gets ``exc``. The chunks go at once:
        nobody will hear the rest of a failed take, and ``exc`` (whose traceback passes
        through frames that hold this flight) would otherwise keep them until a full
        garbage collection — a refused 128 MiB answer stayed in the process."""
        with self._cond:
            if self._value is _NOTHING and self._error is None:
                self._error = exc
                self.chunks = []
            if self._published is _NOTHING and self._landing_error is None:
                self._landing_error = exc
            loops = self._bump()
        _wake(loops)

    @property
    def settled(self) -> bool:
        """Whether the value exists (or the load failed)."""
        return self._value is not _NOTHING or self._error is not None

    @property
    def landed(self) -> bool:
        """Whether the value is published (or the load failed)."""
        return self._published is not _NOTHING or self._landing_error is not None

    def _outcome(self, published: bool) -> T:
        if published:
            if self._landing_error is not None:
                raise self._landing_error
            return self._published  # type: ignore[no-any-return]
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return]

    def _bump(self) -> dict[asyncio.AbstractEventLoop, asyncio.Future[None]]:
        """One more change (caller holds the lock): threads wake; the loops waiting are
        returned, to be woken once the lock is released."""
        self._version += 1
        if self._sleeping:
            self._cond.notify_all()
        if not self._loops:
            return _NO_LOOPS
        loops, self._loops = self._loops, {}
        return loops

    # -- the followers' side ----------------------------------------------------------
    def add_follower(self) -> None:
        """Count one more caller waiting on this flight (the leader hands over to them)."""
        with self._cond:
            self.followers += 1

    def _sleep(self, seconds: float) -> None:
        """Wait on the condition (caller holds the lock), counted so a change knows."""
        self._sleeping += 1
        try:
            self._cond.wait(seconds)
        finally:
            self._sleeping -= 1

    def wait(self, timeout: float, *, published: bool | None = None) -> T:
        """The value (a thread's wait): as it exists, or — for a caller that joined once it
        existed (``published`` None decides so now) — as published. ``TimeoutError`` after
        ``timeout``."""
        published = self.settled if published is None else published
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (self.landed if published else self.settled):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("render did not finish in time")
                self._sleep(left)
        return self._outcome(published)

    async def await_value(self, timeout: float | None) -> T:
        """The value (a coroutine's wait), as ``wait`` decides; ``TimeoutError`` after
        ``timeout``."""
        published = self.settled
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self._version
            if self.landed if published else self.settled:
                return self._outcome(published)
            await self._next_change(seen, deadline)

    def follow(self, timeout: float) -> Iterator[Audio]:
        """Yield the chunks produced so far, then new ones live, until the value exists
        (threads)."""
        deadline = time.monotonic() + timeout
        sent = 0
        while True:
            with self._cond:
                while sent >= len(self.chunks) and not self.settled:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError("render did not finish in time")
                    self._sleep(remaining)
                ready = self.chunks[sent:]
                finished = self.settled
            yield from ready
            sent += len(ready)
            if finished and sent >= len(self.chunks):
                self._outcome(False)  # re-raise a leader's failure
                return

    async def afollow(self, timeout: float | None, whole: Callable[[T], Audio] | None = None,
                      *, to_landing: bool = False) -> AsyncIterator[Audio]:
        """The chunks so far, then new ones live, until the value exists (coroutines) — or,
        ``to_landing``, until it is published (the leader's own caller: once its answer
        ends, asking again is a hit). A load that published no chunk (another process's
        take) gives ``whole(value)``."""
        sent = 0
        while True:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:  # each chunk within ``timeout`` of the last
                seen = self._version
                done = self.landed if to_landing else self.settled
                if sent < len(self.chunks) or done:
                    break
                await self._next_change(seen, deadline)
            ready = self.chunks[sent:]
            for chunk in ready:
                yield chunk
            sent += len(ready)
            if done and sent >= len(self.chunks):
                value = self._outcome(False)  # re-raises the leader's failure
                if to_landing:
                    self._outcome(True)
                if sent == 0 and whole is not None:
                    yield whole(value)
                return

    async def begun(self, timeout: float | None) -> None:
        """Until the leader said how the value is served, or it exists."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self._version
            if self.how is not None or self.settled:
                return
            await self._next_change(seen, deadline)

    async def _next_change(self, seen: int, deadline: float | None) -> None:
        """Until the flight changes after version ``seen`` (at once if it already has)."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._version != seen:
                return
            wake = self._loops.get(loop)
            if wake is None:
                wake = self._loops[loop] = loop.create_future()
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("render did not finish in time")
        # shielded: a caller that gives up cancels its own wait, never its loop's wake-up
        await asyncio.wait_for(asyncio.shield(wake), left)


def _wake(loops: dict[asyncio.AbstractEventLoop, asyncio.Future[None]]) -> None:
    """Wake every coroutine of each loop with one call per loop."""
    if not loops:
        return
    for loop, wake in loops.items():
        with contextlib.suppress(RuntimeError):  # a loop that has closed waits no more
            loop.call_soon_threadsafe(_set, wake)


def _set(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


class FlightGroup:
    """The flights of one process, by key."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight[Any]] = {}
        self._lock = threading.Lock()

    def join_or_lead(self, key: str) -> tuple[Flight[Any], bool]:
        """Return the key's flight and whether the caller leads it."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                flight.add_follower()
                return flight, False
            flight = self._flights[key] = Flight()
            return flight, True

    def get(self, key: str) -> Flight[Any] | None:
        """Return the flight in progress for ``key``, if any."""
        return self._flights.get(key)

    def done(self, key: str, flight: Flight[Any]) -> None:
        """Remove a finished flight (its leader, once the value is published or failed)."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]

    def __len__(self) -> int:
        return len(self._flights)


@contextlib.contextmanager
def key_lock(lock_dir: Path, key: str, wait: float, poll: float = 0.005,
             on_fault: Callable[[OSError], None] | None = None) -> Iterator[bool]:
    """Hold an exclusive cross-process lock on ``key``; yields False if ``wait`` ran out.

    The holder unlinks the lock file before releasing it, so the folder stays small.
    A waiter that then wins the lock on the unlinked inode notices (the path no
    longer names its file) and retries on a fresh one — two holders can never
    each believe they own the key.

    The lock is an efficiency device (one render instead of several), never what
    makes a take correct, so it fails open: a folder that turned read-only or ran
    out of inodes yields False (``on_fault`` hears why) and the caller renders
    without it rather than failing the request.
    """
    folder = f"{lock_dir}/{key[:2]}"
    path = f"{folder}/{key}.lock"
    deadline = time.monotonic() + wait
    try:
        try:
            fd = _acquire(path, deadline, poll)
        except FileNotFoundError:  # the shard folder does not exist yet
            private_dirs(folder)
            fd = _acquire(path, deadline, poll)
    except OSError as exc:
        fd = None
        if on_fault is not None:
            on_fault(exc)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)  # closing drops the flock


def _acquire(path: str, deadline: float, poll: float) -> int | None:
    while True:
        # a link planted at the lock path is refused (ELOOP: render without the lock)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)
            continue
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # we locked a file its holder already unlinked; try the new one
