"""Why a server process is stopping, for the log line that says so.

uvicorn turns SIGTERM and SIGINT into a graceful shutdown but logs neither; an
operator reading a log must see *why* a node went away (a deploy's SIGTERM, a
Ctrl-C, or the server told to exit from inside). ``StopSignals.watch`` chains a
recorder in front of the handlers the server installed (so it changes nothing
else, and is dropped with them when uvicorn restores its own at exit).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

WATCHED = (signal.SIGTERM, signal.SIGINT)
"""The signals uvicorn stops gracefully on."""


class StopSignals:
    """The first stopping signal this process received since ``watch``."""

    def __init__(self) -> None:
        self.received: str | None = None

    def watch(self) -> None:
        """Record the signals the running server handles (main thread only: elsewhere, as
        in a test's server thread, signals are not this process's way to stop it)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in WATCHED:
            previous = signal.getsignal(sig)
            if callable(previous):  # not SIG_DFL or SIG_IGN: someone stops gracefully on it
                signal.signal(sig, self._recorder(previous))

    def _recorder(self, previous: signal.Handlers | object) -> signal.Handlers | object:
        def record(signum: int, frame: FrameType | None) -> None:
            self.received = self.received or signal.Signals(signum).name
            previous(signum, frame)  # type: ignore[operator]
        return record

    @property
    def reason(self) -> str:
        """``SIGTERM``, ``SIGINT``, or that no signal was involved."""
        return self.received or "no signal received"
