"""Deletes and pin changes reach every process on the machine within ``POLL_SECONDS``.

Each process keeps its own memory tier, so every process sharing a folder appends what it
changed to ``invalidations.log`` (``O_APPEND``, one short line per key) and follows the file
from a background thread, applying the others' lines. ``voxcache gc`` rotates it past
``ROTATE_BYTES`` under ``locks/invalidations.lock`` (appends hold it shared), so a follower
loses nothing; one that cannot read it any more drops its memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..fsmode import locked, private_dirs

log = logging.getLogger("voxcache.invalidation")

LOG_NAME = "invalidations.log"
LOCK_NAME = "invalidations.lock"
POLL_SECONDS = 0.1
ROTATE_BYTES = 8 << 20
EVENTS = ("delete", "pin", "unpin", "clear", "revision", "adopt")
"""``revision``: an engine's model revision changed (a gateway proxied a weight switch);
its "key" is the engine id, and ``Cache.on_event`` listeners reload what is in force.
``adopt``: the folder now holds another take of the key (the one the shared tiers
published): a copy in memory is dropped and read again."""

Apply = Callable[[str, str], None]
"""Called with (event, key) for each change another process made; ``clear`` drops all."""


class InvalidationLog:
    """Publish this process's changes; follow everyone else's."""

    def __init__(self, root: Path, apply: Apply, *, poll: float = POLL_SECONDS) -> None:
        self.path = Path(root) / LOG_NAME
        self._lock_path = Path(root) / "locks" / LOCK_NAME
        self._apply = apply
        self._poll = poll
        self._me = str(os.getpid())
        self._fd: int | None = None
        self._offset = 0
        self._partial = b""
        self._stop = threading.Event()
        self._poll_lock = threading.Lock()
        self._open_at_end()
        self._thread = threading.Thread(target=self._follow, name="voxcache-invalidation",
                                        daemon=True)
        self._thread.start()

    # -- publishing ------------------------------------------------------------
    def publish(self, events: Iterable[tuple[str, str]]) -> None:
        """Append (event, key) lines for the other processes; raises OSError if it cannot."""
        data = "".join(f"{event} {key} {self._me}\n" for event, key in events).encode()
        if not data:
            return
        with locked(self._lock_path, fcntl.LOCK_SH):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:  # one write normally; a short one continues at the end
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)

    def rotate(self, threshold: int = ROTATE_BYTES) -> bool:
        """Start a new log once the current one passes ``threshold`` bytes (gc calls it)."""
        with locked(self._lock_path):
            try:
                if os.stat(self.path).st_size < threshold:
                    return False
            except FileNotFoundError:
                return False
            os.replace(self.path, f"{self.path}.old")
            return True

    # -- following -------------------------------------------------------------
    def poll(self) -> int:
        """Apply what other processes appended since the last poll; return how many lines."""
        with self._poll_lock:
            return self._poll_once()

    def _poll_once(self) -> int:
        applied = 0
        try:
            if self._fd is None:
                self._open_at_end(start=0)
                if self._fd is None:
                    return 0
            applied += self._drain()
            if self._replaced():
                applied += self._drain()  # everything written to the old file, then switch
                os.close(self._fd)
                self._fd = None
                self._partial = b""
                self._open_at_end(start=0)
                if self._fd is not None:
                    applied += self._drain()
        except OSError as exc:
            log.warning("cannot follow %s (%s): dropping the memory tier, which can no longer "
                        "be proven fresh", self.path, exc)
            self._apply("clear", "")
            self._reset()
        return applied

    def _drain(self) -> int:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size < self._offset:  # truncated by hand: anything may have been missed
            self._apply("clear", "")
            self._offset, self._partial = size, b""
            return 1
        applied = 0
        while self._offset < size:
            chunk = os.pread(self._fd, min(size - self._offset, 1 << 20), self._offset)
            if not chunk:
                break
            self._offset += len(chunk)
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()  # a line still being written stays for later
            for event, key in self._parse(lines):
                self._apply(event, key)
                applied += 1
        return applied

    def _parse(self, lines: list[bytes]) -> Iterator[tuple[str, str]]:
        for line in lines:
            parts = line.decode("ascii", "replace").split(" ")
            if len(parts) == 3 and parts[0] in EVENTS and parts[2] != self._me:
                yield parts[0], parts[1]

    def _replaced(self) -> bool:
        assert self._fd is not None
        try:
            return os.stat(self.path).st_ino != os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False  # rotated and not yet written again: keep the old file for now

    def _open_at_end(self, start: int | None = None) -> None:
        """Open the log (creating it) and start at its end, or at ``start``."""
        try:
            private_dirs(self.path.parent)
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            self._fd = None  # a read-only or full folder: try again at the next poll
            return
        self._offset = os.fstat(self._fd).st_size if start is None else start

    def _reset(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd, self._partial = None, b""

    def _follow(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self.poll()
            except Exception:  # a bad line or a bug must not end invalidation for good
                log.exception("invalidation follower failed; dropping the memory tier")
                self._apply("clear", "")
                self._reset()

    def close(self) -> None:
        """Stop following (pending lines are applied by one last poll)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._reset()
