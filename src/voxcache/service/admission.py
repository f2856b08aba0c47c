"""Admission control: a bounded pool of render slots, a bounded queue, and a separate I/O pool.

Renders hold a CPU for seconds; hits take microseconds (memory) or a file read
(disk). If they shared one pool, a burst of misses would make every hit wait, so
they never do: memory hits are answered on the event loop, disk reads run in
``io`` (its own threads), and renders run in ``renders`` with ``concurrency``
threads. A render that would make more than ``concurrency + queue`` renders
outstanding is refused at once with ``Overloaded`` (503 + Retry-After) — a fast
no beats an unbounded wait.

Queued renders start in priority order: ``INTERACTIVE`` before ``BACKGROUND``
(warm-up jobs, pre-rendering), so a warm list of a thousand phrases never makes
a listener wait behind it for more than the renders already running.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from queue import PriorityQueue
from typing import Any, TypeVar

from ..errors import Overloaded

T = TypeVar("T")
INTERACTIVE, BACKGROUND = 0, 1
PRIORITIES = {"interactive": INTERACTIVE, "background": BACKGROUND}
_STOP = (2, 0, None)


class Admission:
    """Render slots and an I/O pool for one engine."""

    def __init__(self, concurrency: int, queue: int, io_threads: int) -> None:
        self.concurrency = max(1, concurrency)
        self.queue = max(0, queue)
        self._jobs: PriorityQueue[tuple[int, int, Any]] = PriorityQueue()
        self._order = itertools.count()  # FIFO within one priority
        self._workers = [threading.Thread(target=self._work, name=f"voxcache-render-{i}",
                                          daemon=True) for i in range(self.concurrency)]
        for worker in self._workers:
            worker.start()
        self.io = ThreadPoolExecutor(max(1, io_threads), thread_name_prefix="voxcache-io")
        self._lock = threading.Lock()
        self._outstanding = 0
        self._running = 0
        self.mean_render_seconds = 1.0
        """Smoothed render time, used for the Retry-After hint."""

    @property
    def queued(self) -> int:
        """Renders admitted but waiting for a slot."""
        return max(0, self._outstanding - self._running)

    @property
    def running(self) -> int:
        """Renders holding a slot now."""
        return self._running

    def submit_render(self, fn: Callable[..., T], *args: Any,
                      priority: int = INTERACTIVE) -> Future[T]:
        """Start ``fn`` in a render slot, or raise ``Overloaded`` when slots and queue are full."""
        with self._lock:
            if self._outstanding >= self.concurrency + self.queue:
                wait = self.mean_render_seconds * (self.queued + 1) / self.concurrency
                raise Overloaded(
                    f"{self._outstanding} renders in progress or queued (limit "
                    f"{self.concurrency} running + {self.queue} queued); retry later",
                    retry_after=max(1.0, wait))
            self._outstanding += 1
        future: Future[T] = Future()
        self._jobs.put((priority, next(self._order), (future, fn, args)))
        return future

    def _work(self) -> None:
        while True:
            _priority, _order, job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                self._finished()
                continue
            with self._lock:
                self._running += 1
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
            finally:
                with self._lock:
                    self._running -= 1
                self._finished()

    def _finished(self) -> None:
        with self._lock:
            self._outstanding -= 1

    def record_render(self, seconds: float) -> None:
        """Fold one render's time into the Retry-After estimate."""
        self.mean_render_seconds = 0.8 * self.mean_render_seconds + 0.2 * seconds

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a storage read in the I/O pool (never behind renders)."""
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    def shutdown(self) -> None:
        """Let in-flight renders finish and their takes be written, then stop the threads."""
        for _ in self._workers:
            self._jobs.put(_STOP)  # sorts after every job still queued
        for worker in self._workers:
            worker.join()
        self.io.shutdown(wait=True)
