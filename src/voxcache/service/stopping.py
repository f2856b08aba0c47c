"""When a server process is told to stop: say why, and stop waiting for the upstream.

uvicorn drains on SIGTERM/SIGINT but logs neither, and a miss waiting on a hung upstream
kept the process up. One hook before the server's own handlers records the signal (for the
log lines that say why the node went away) and gives upstream calls ``grace`` seconds (then
503 with ``Retry-After``, nothing stored); the app's shutdown ends what is left at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("voxcache.service")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals uvicorn stops gracefully on."""


class StopSignals:
    """The first stopping signal this process received, and what it set off."""

    def __init__(self) -> None:
        self.received: str | None = None

    def watch(self, engine: Any = None, grace: float = 0.0) -> Callable[[], None]:
        """Put the hook in front of the handlers the running server installed (main thread
        only: elsewhere, as in a test's server thread, signals are not how it stops); return
        what takes it away again. ``engine``: whose upstream calls get ``grace`` seconds."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        stop = getattr(engine, "stop_waiting", None)
        previous = {sig: signal.getsignal(sig) for sig in SIGNALS}

        def hook(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            self.received = self.received or name
            if stop is not None:
                log.info("stop requested (%s): upstream calls still running in %g s are cut "
                         "off", name, grace)
                stop(grace)
            before = previous[signal.Signals(signum)]
            if callable(before):
                before(signum, frame)
            elif before == signal.SIG_DFL:  # nobody else handles it: what it would have done
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        for sig in SIGNALS:
            if callable(previous[sig]) or stop is not None:
                signal.signal(sig, hook)

        def restore() -> None:
            for sig, before in previous.items():
                if signal.getsignal(sig) is hook:
                    signal.signal(sig, before)

        return restore

    @property
    def reason(self) -> str:
        """``SIGTERM``, ``SIGINT``, or that no signal was involved."""
        return self.received or "no signal received"


def stop_waiting_now(engine: Any) -> None:
    """The app is shutting down: end every upstream call still running, so no miss thread
    can hold the exit."""
    stop = getattr(engine, "stop_waiting", None)
    if stop is not None:
        stop(0.0)
