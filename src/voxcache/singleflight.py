"""One render per key, however many ask: in-process flights and cross-process file locks.

In a process, the first caller for a key becomes the leader and the rest wait on
its ``Future`` (threads with ``result()``, asyncio with ``wrap_future``); the
leader publishes each produced chunk so late joiners can stream what exists so
far. Across processes on one machine, the leader takes an exclusive ``flock`` on
a per-key lock file: the kernel drops it when a process dies, so a crashed
renderer never strands the others. Every wait is bounded; a waiter that gives
up renders itself (a duplicate render beats a stuck request).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from .audio import Audio
from .fsmode import FILE_MODE, private_dirs


class Flight:
    """One in-progress render: its eventual result and the chunks produced so far."""

    def __init__(self) -> None:
        self.future: Future[Any] = Future()
        self.chunks: list[Audio] = []
        self._cond = threading.Condition()
        self.followers = 0
        # Followers wake the moment the take exists (or the render failed), not when the
        # leader lands the flight after writing it through the tiers. (Through a weak
        # reference: the future keeps its callbacks, and a flight that held itself would
        # keep its chunks until a full garbage collection.)
        flight = weakref.ref(self)
        self.future.add_done_callback(lambda _done: (live := flight()) and live.close())

    def add_follower(self) -> None:
        """Count one more caller waiting on this flight (the leader hands over to them)."""
        with self._cond:
            self.followers += 1

    def publish(self, chunk: Audio) -> None:
        """Make a freshly rendered chunk visible to live followers."""
        with self._cond:
            self.chunks.append(chunk)
            self._cond.notify_all()

    def close(self) -> None:
        """Wake followers after the final chunk (or a failure)."""
        with self._cond:
            self._cond.notify_all()

    def follow(self, timeout: float) -> Iterator[Audio]:
        """Yield the chunks produced so far, then new ones live, until the render ends."""
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


class FlightGroup:
    """The flights of one process, by key."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}
        self._lock = threading.Lock()

    def join_or_lead(self, key: str) -> tuple[Flight, bool]:
        """Return the key's flight and whether the caller leads it."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                flight.add_follower()
                return flight, False
            flight = self._flights[key] = Flight()
            return flight, True

    def get(self, key: str) -> Flight | None:
        """Return the flight in progress for ``key``, if any."""
        return self._flights.get(key)

    def land(self, key: str, flight: Flight) -> None:
        """Remove a finished flight (leader only, in ``finally``)."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.close()

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
