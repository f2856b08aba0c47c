"""When the process is told to stop, stop waiting for the upstream.

uvicorn answers SIGTERM (and Ctrl-C) by letting the requests in flight finish, for up to
``--graceful-timeout``, and only then runs the app's shutdown, which waits for the miss
threads. A miss waiting on an upstream that trickles or hangs kept the process up for
the whole graceful timeout and then for as long as the upstream cared to (the thread's
read never ended). So the signal itself starts the upstream's cut-off: calls still
running ``[service] shutdown_grace`` seconds later are ended (their callers get 503 with
``Retry-After``; nothing is stored), and the app's shutdown ends whatever is left at
once. uvicorn's own handler still runs: this one is put in front of it.
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


def on_stop_signal(engine: Any, grace: float) -> Callable[[], None]:
    """Make SIGTERM/SIGINT give ``engine``'s upstream calls ``grace`` seconds, before the
    server's own handler runs; return what undoes it. Nothing to do for an engine without
    an upstream, or outside the main thread (signals are delivered there only)."""
    stop = getattr(engine, "stop_waiting", None)
    if stop is None or threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}

    def handler(sig: int, frame: FrameType | None) -> None:
        log.info("stop requested (%s): upstream calls still running in %g s are cut off",
                 signal.Signals(sig).name, grace)
        stop(grace)
        before = previous[signal.Signals(sig)]
        if callable(before):
            before(sig, frame)
        elif before == signal.SIG_DFL:  # nobody else handles it: what it would have done
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    for sig in SIGNALS:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before)

    return restore


def stop_waiting_now(engine: Any) -> None:
    """The app is shutting down: end every upstream call still running, so no miss thread
    can hold the exit."""
    stop = getattr(engine, "stop_waiting", None)
    if stop is not None:
        stop(0.0)
