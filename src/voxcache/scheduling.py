"""Admission control: bounded render slots with priorities, a bounded backlog, an I/O pool.

Hits never wait behind renders: memory hits answer on the event loop, slower tiers read
in ``io``, and a miss runs in a thread of its own that takes one of ``concurrency`` render
slots only when it really renders. A render past ``concurrency + queue`` is refused at
once with ``Overloaded`` (503 + Retry-After); waiting renders go ``INTERACTIVE`` before
``BACKGROUND``. A library user gets ``Admission.unbounded()``. docs/operating/service.md,
"Admission control".
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import heapq
import itertools
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import Overloaded

T = TypeVar("T")
INTERACTIVE, BACKGROUND = 0, 1
PRIORITIES = {"interactive": INTERACTIVE, "background": BACKGROUND}
SPARE_MISS_THREADS = 16

RENDER_PRIORITY: contextvars.ContextVar[int] = contextvars.ContextVar(
    "voxcache_render_priority", default=INTERACTIVE)
"""The priority of the renders the current request starts (set per request by the service;
background work sets ``BACKGROUND``). Miss threads run in a copy of the submitter's context."""


def release_memory() -> None:
    """Hand freed heap memory back to the system (glibc's ``malloc_trim``; elsewhere a no-op).

    A render that failed after holding a lot of audio (an upstream answer refused at its
    size limit) freed it in small blocks the allocator keeps for reuse: the process would
    stay that large. Errors that follow such a render say so (``release_memory``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


class Admission:
    """Render slots, the miss backlog and the I/O pool of one engine."""

    def __init__(self, concurrency: int | None, queue: int, io_threads: int) -> None:
        self.concurrency = None if concurrency is None else max(1, concurrency)
        """Renders at once; None means no limit (a library caller renders in its thread)."""
        self.queue = max(0, queue)
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, int]] = []  # (priority, ticket), a heap
        self._tickets = itertools.count()
        self._running = 0
        self._outstanding = 0
        self.mean_render_seconds = 1.0
        """Smoothed render time, used for the Retry-After hint."""
        backlog = None if self.concurrency is None else self.concurrency + self.queue
        self._threads = (backlog or 16) + SPARE_MISS_THREADS
        self._misses = ThreadPoolExecutor(self._threads, thread_name_prefix="voxcache-miss")
        self.io = ThreadPoolExecutor(max(1, io_threads), thread_name_prefix="voxcache-io")

    @classmethod
    def unbounded(cls) -> Admission:
        """No limits: what a library caller gets (renders never wait for a slot)."""
        return cls(None, 0, 8)

    # -- figures ---------------------------------------------------------------------
    @property
    def running(self) -> int:
        """Renders holding a slot now."""
        return self._running

    @property
    def queued(self) -> int:
        """Renders admitted and waiting for a slot (the render queue's depth)."""
        return len(self._waiting)

    # -- misses ------------------------------------------------------------------------
    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run a miss in a thread of its own (in the caller's context, so its render
        priority follows it); ``Overloaded`` once every miss thread is taken."""
        with self._cond:
            if self.concurrency is not None and self._outstanding >= self._threads:
                raise self._overloaded()
            self._outstanding += 1
        context = contextvars.copy_context()
        try:
            future = self._misses.submit(context.run, fn, *args, **kwargs)
        except BaseException:
            self._finished()
            raise
        future.add_done_callback(self._finished_miss)
        return future

    def _finished_miss(self, future: Future[Any]) -> None:
        self._finished()
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            # The exception stays in the futures its callers wait on, with every frame it
            # left — and they with the audio the render had made: a cycle (frame → future
            # → exception → frame) that only a full collection frees, which a large heap
            # may not run for hours. The miss has ended: its frames' locals can go now.
            traceback.clear_frames(exc.__traceback__)
            if getattr(exc, "release_memory", False):
                release_memory()

    def _finished(self) -> None:
        with self._cond:
            self._outstanding -= 1

    def _overloaded(self) -> Overloaded:
        assert self.concurrency is not None
        wait = self.mean_render_seconds * (self.queued + 1) / self.concurrency
        return Overloaded(
            f"{self._running + len(self._waiting)} renders in progress or queued (limit "
            f"{self.concurrency} running + {self.queue} queued); retry later",
            retry_after=max(1.0, wait))

    # -- render slots ------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, priority: int | None = None) -> Iterator[None]:
        """Hold one render slot (waiting in priority order) while the engine renders."""
        if self.concurrency is None:
            started = time.perf_counter()
            yield
            self.record_render(time.perf_counter() - started)
            return
        priority = RENDER_PRIORITY.get() if priority is None else priority
        ticket = (priority, next(self._tickets))
        with self._cond:
            if self._running + len(self._waiting) >= self.concurrency + self.queue:
                raise self._overloaded()
            heapq.heappush(self._waiting, ticket)
            while self._running >= self.concurrency or self._waiting[0] != ticket:
                self._cond.wait()
            heapq.heappop(self._waiting)
            self._running += 1
        started = time.perf_counter()
        try:
            yield
        finally:
            self.record_render(time.perf_counter() - started)
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def record_render(self, seconds: float) -> None:
        """Fold one render's time into the Retry-After estimate."""
        self.mean_render_seconds = 0.8 * self.mean_render_seconds + 0.2 * seconds

    # -- reads -------------------------------------------------------------------------
    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a storage read in the I/O pool (never behind renders)."""
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    def shutdown(self) -> None:
        """Let outstanding misses finish and their takes be written, then stop the threads."""
        self._misses.shutdown(wait=True)
        self.io.shutdown(wait=True)
