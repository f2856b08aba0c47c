"""Progress bars for commands that can run for minutes (warm, gc, rerender, pack …).

A bar on stderr when stderr is a terminal, nothing at all otherwise (not with ``--json``,
not in cron or a pipe); the result a command prints is the same either way.

    with progress(as_json=args.json) as bars:
        files = bars.task("verifying files", total=len(paths))   # files.advance()

``Task.report`` has the ``(done, total)`` shape of a library callback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from .common import progress_console


def shown(as_json: bool) -> bool:
    """Whether a bar is drawn: stderr is a terminal and the output is not ``--json``."""
    return not as_json and progress_console.is_terminal


class Task:
    """One bar: a counted step of a command."""

    def __init__(self, bars: Progress, task: TaskID) -> None:
        self._bars = bars
        self._task = task

    def advance(self, amount: float = 1) -> None:
        """Count ``amount`` more done."""
        self._bars.advance(self._task, amount)

    def update(self, *, completed: float | None = None, total: float | None = None,
               note: str | None = None) -> None:
        """Set what is done, the total (once it is known) or the note shown beside it."""
        fields = {} if note is None else {"note": note}
        self._bars.update(self._task, completed=completed, total=total, **fields)

    def report(self, done: float, total: float | None) -> None:
        """A ``(done, total)`` callback for library code that reports its own progress."""
        self._bars.update(self._task, completed=done, total=total)


class Bars:
    """The bars of one command (several steps may follow each other)."""

    def __init__(self, bars: Progress) -> None:
        self._bars = bars

    def task(self, description: str, total: float | None = None) -> Task:
        """Start a bar; ``total`` None shows a pulse until it is known."""
        return Task(self._bars, self._bars.add_task(description, total=total, note=""))


@contextlib.contextmanager
def progress(*, as_json: bool, bytes_: bool = False) -> Iterator[Bars]:
    """Bars on stderr for the duration of a command, or none (see ``shown``)."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               DownloadColumn() if bytes_ else MofNCompleteColumn(),
               TextColumn("{task.fields[note]}"), TimeRemainingColumn())
    with Progress(*columns, console=progress_console, disable=not shown(as_json)) as bars:
        yield Bars(bars)
