"""Deadlines for many short awaits, kept by one timer per event loop instead of one each.

Every request's body is read under a deadline (``guard.BodyLimit``). A timer per read
(``asyncio.timeout``) costs 7–11 µs — scheduling and cancelling a timer handle — on every
POST, hits included, almost always for a body that had arrived with the headers. Here a
watched await costs a dict entry; one tick per loop, running only while something is
watched, cancels the tasks whose deadline has passed. A late task is found within
``TICK`` seconds of its deadline, which is precision enough for a limit of seconds.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

Task = asyncio.Task[Any]


class Deadlines:
    """Tasks being watched, each with the monotonic time by which it must be done."""

    TICK = 0.25

    def __init__(self) -> None:
        self._due: dict[Task, float] = {}
        self._late: weakref.WeakSet[Task] = weakref.WeakSet()
        self._ticking: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()

    def start(self, seconds: float) -> Task:
        """Cancel the current task if ``stop`` has not been called for it ``seconds`` from now;
        its owner catches the CancelledError and asks ``overdue`` whether it was this.
        (Not a context manager: ``contextlib``'s costs a microsecond of every POST.)"""
        task = asyncio.current_task()
        assert task is not None, "deadlines are for tasks"
        self._due[task] = time.monotonic() + seconds
        loop = task.get_loop()
        if loop not in self._ticking:
            self._ticking.add(loop)
            loop.call_later(self.TICK, self._tick, loop)
        return task

    def stop(self, task: Task) -> None:
        """The watched work is done (or failed): no deadline for ``task`` any more."""
        self._due.pop(task, None)

    def overdue(self, task: Task) -> bool:
        """True (once) when ``task`` was cancelled here for running past its deadline; the
        cancellation is then withdrawn, so the task can go on to answer."""
        if task not in self._late:
            return False
        self._late.discard(task)
        task.uncancel()
        return True

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now, waiting = time.monotonic(), False
        for task, due in list(self._due.items()):
            if task.get_loop() is not loop:
                continue
            if due > now:
                waiting = True
                continue
            del self._due[task]
            self._late.add(task)
            task.cancel()
        if waiting:
            loop.call_later(self.TICK, self._tick, loop)
        else:
            self._ticking.discard(loop)
