"""One render per key, however many ask: in-process flights and cross-process file locks.

A ``Flight`` is one load in progress. Its leader says how it is served (``begin``),
hands over each chunk as it exists (``chunk``), settles the value the moment it exists
(``settle``: everyone waiting then has it) and lands it once it is published
(``land``: what a caller that joins later gets, so nobody joining after publication
is handed a take that lost the race to be the key's). Threads and coroutines wait on
the same flight: threads on a condition, coroutines on one future per event loop,
set by one call per change, so every waiter of a loop wakes in one pass.

Across processes on one machine, the leader takes an exclusive ``flock`` on a per-key
lock file: the kernel drops it when a process dies, so a crashed renderer never
strands the others. Every wait is bounded; a waiter that gives up renders itself (a
duplicate render beats a stuck request, and publication makes it converge).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Generic, TypeVar

from .audio import Audio
from .fsmode import FILE_MODE, private_dirs

T = TypeVar("T")


class Flight(Generic[T]):
    """One load in progress: how it is served, its chunks so far, its value."""

    def __init__(self) -> None:
        self.future: Future[T] = Future()
        """The value as soon as it exists (or the failure)."""
        self.landed: Future[T] = Future()
        """The value as published: what a caller that joins after ``future`` is set gets."""
        self.chunks: list[Audio] = []
        self.how: tuple[str, str, tuple[int, int] | None] | None = None
        """What ``begin`` said: (cache, tier, segments)."""
        self.reason = ""
        """Why the value will not be stored, when ``begin`` knew it already."""
        self.followers = 0
        self._version = 0
        """Changes so far (a coroutine that looked at the state waits for the next one)."""
        self._cond = threading.Condition()
        self._loops: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}
        self.future.add_done_callback(lambda _done: self._changed())
        self.landed.add_done_callback(lambda _done: self._changed())

    # -- the leader's side (``outcome.Progress``) -------------------------------------
    def begin(self, cache: str, tier: str, segments: tuple[int, int] | None = None,
              reason: str = "") -> None:
        """How the value is being served, said once before its first chunk."""
        if self.how is None:
            self.reason = reason
            self.how = (cache, tier, segments)
            self._changed()

    def chunk(self, audio: Audio) -> None:
        """Make the next chunk visible to every follower."""
        with self._cond:
            self.chunks.append(audio)
        self._changed()

    def settle(self, value: T) -> None:
        """The value exists: everyone waiting has it now (unless already settled)."""
        if not self.future.done():
            self.future.set_result(value)

    def fail(self, exc: BaseException) -> None:
        """The load failed: every waiter gets ``exc`` (unless the value already exists)."""
        if not self.future.done():
            self.future.set_exception(exc)
        if not self.landed.done():
            self.landed.set_exception(exc)

    def land(self, value: T) -> None:
        """The value is published (stored where it is the key's)."""
        self.settle(value)
        if not self.landed.done():
            self.landed.set_result(value)

    def _changed(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()
            loops, self._loops = self._loops, {}
        for loop, wake in loops.items():
            with contextlib.suppress(RuntimeError):  # a loop that has closed waits no more
                loop.call_soon_threadsafe(_set, wake)

    # -- the followers' side ----------------------------------------------------------
    def add_follower(self) -> None:
        """Count one more caller waiting on this flight (the leader hands over to them)."""
        with self._cond:
            self.followers += 1

    def value_future(self) -> Future[T]:
        """What a caller joining now waits for: the value, or — once it exists — the
        published value (a later caller never gets a take that lost publication)."""
        return self.landed if self.future.done() else self.future

    def wait(self, timeout: float) -> T:
        """The value (a thread's wait); ``TimeoutError`` after ``timeout``."""
        return self.value_future().result(timeout)

    async def await_value(self, timeout: float | None) -> T:
        """The value (a coroutine's wait); ``TimeoutError`` after ``timeout``."""
        target = self.value_future()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self._version
            if target.done():
                return target.result()
            await self._next_change(seen, deadline)

    def follow(self, timeout: float) -> Iterator[Audio]:
        """Yield the chunks so far, then new ones live, until the load ends (threads)."""
        deadline = time.monotonic() + timeout
        sent = 0
        while True:
            with self._cond:
                while sent == len(self.chunks) and not self.future.done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError("render did not finish in time")
                    self._cond.wait(remaining)
                ready = self.chunks[sent:]
                finished = self.future.done()
            yield from ready
            sent += len(ready)
            if finished and sent == len(self.chunks):
                self.future.result()  # re-raise a leader's failure
                return

    async def afollow(self, timeout: float | None, whole: Callable[[T], Audio] | None = None,
                      *, to_landing: bool = False) -> AsyncIterator[Audio]:
        """The chunks so far, then new ones live, until the value exists (coroutines) — or,
        ``to_landing``, until it is published (the leader's own caller: once its answer
        ends, asking again is a hit). A load that published no chunk (another process's
        take) gives ``whole(value)``."""
        end = self.landed if to_landing else self.future
        sent = 0
        while True:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:  # each chunk within ``timeout`` of the last
                seen = self._version
                if sent < len(self.chunks) or end.done():
                    break
                await self._next_change(seen, deadline)
            ready = self.chunks[sent:]
            for chunk in ready:
                yield chunk
            sent += len(ready)
            if end.done() and sent == len(self.chunks):
                value = self.future.result()  # re-raises the leader's failure
                end.result()
                if sent == 0 and whole is not None:
                    yield whole(value)
                return

    async def begun(self, timeout: float | None) -> None:
        """Until the leader said how the value is served, or it exists."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self._version
            if self.how is not None or self.future.done():
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
