"""One render per key across nodes: a render lease per key in Redis.

Taken after the machine's flock (so one process per node asks Redis) with ``SET … NX PX
GET`` (the token names its holder), renewed every ``ttl / 3`` by a keeper, released after
the take has landed in the shared tiers (``landed`` on the bus wakes every waiter; a failed
render announces ``failed``), compare-and-delete. Waiters follow the bus and poll ``SET NX``
as a fallback. An efficiency lock: it fails open under its own breaker (``lease_failopen``);
publication makes duplicates converge. docs/operating/cluster.md, "One render per key across nodes".
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

log = logging.getLogger("voxcache.leases")

T = TypeVar("T")
LEASE_SECONDS = 5.0
"""A lease's time to live; renewed every third of it while its render runs."""
POLL_SECONDS = 0.2
"""A waiter tries ``SET NX`` this often while it waits (the fallback to the bus)."""
SETTLE_SECONDS = 10.0
"""Longest a release waits for its take to land in the shared tiers."""
_FAILED: Any = object()

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Guard(Protocol):
    """Runs one Redis operation under the Redis tier's breaker; ``default`` on failure."""

    def __call__(self, operation: str, fn: Callable[[], T], default: T) -> T: ...


class Wakeups(Protocol):
    """What the lease needs of the bus: waiters woken by a holder's outcome."""

    def expect(self, token: str) -> Waiter:
        """Register interest in ``token``'s outcome (before looking, so none is missed)."""

    def landed(self, key: str, token: str, outcome: str) -> None:
        """Tell every node that ``token``'s render of ``key`` ended (``landed``/``failed``)."""


class Waiter(Protocol):
    announced_at: float | None
    """When the holder announced the outcome heard last (its ``time.time()``)."""

    def wait(self, timeout: float) -> str | None:
        """The outcome (``landed``/``failed``) once it arrives, None on timeout."""

    def close(self) -> None:
        """Stop listening."""


def node_name() -> str:
    """``host/pid``: who holds a lease (an operator, or a test, can find the process)."""
    return f"{socket.gethostname()}/{os.getpid()}"


class Leases:
    """Render leases of one deployment (one Redis key prefix)."""

    def __init__(self, connection: Callable[[], Any], lease_name: Callable[[str], str], *,
                 guard: Guard, wakeups: Wakeups,
                 settle: Callable[[str, float], bool],
                 count: Callable[[str, int], None], ttl: float = LEASE_SECONDS,
                 poll: float = POLL_SECONDS) -> None:
        self._connection = connection
        self._name = lease_name
        self._guard = guard
        self._wakeups = wakeups
        self._settle = settle
        self._count = count
        self.ttl = ttl
        self.poll = poll
        self._held: dict[str, tuple[str, float]] = {}
        """Lease name → (our token, when it was last set), for every lease this process
        holds: the keeper renews each a third of ``ttl`` after it was taken or renewed."""
        self._lock = threading.Lock()
        self._stop = False
        self._wake = threading.Event()
        self._releases = ThreadPoolExecutor(max_workers=4,
                                            thread_name_prefix="voxcache-lease-release")
        self._keeper = threading.Thread(target=self._keep, name="voxcache-lease-keeper",
                                        daemon=True)
        self._keeper.start()

    @contextlib.contextmanager
    def hold(self, key: str, wait: float) -> Iterator[bool]:
        """The key's lease for the block, or word that its holder's take has landed.

        Yields True when the caller may go on — it holds the lease, or the holder it
        waited for has landed its take (read it from the tiers), or Redis could not be
        asked (fail open) — and False when ``wait`` ran out (render without it)."""
        name = self._name(key)
        token = f"{node_name()}/{secrets.token_hex(6)}"
        outcome = self._take(name, token, wait)
        if outcome != "held":
            yield outcome != "timeout"
            return
        failed = True
        try:
            yield True
            failed = False
        finally:
            self._release(key, name, token, "failed" if failed else "landed")

    def _take(self, name: str, token: str, wait: float) -> str:
        """``held``, ``landed`` (the holder's take is in the tiers), ``open`` (Redis could
        not be asked) or ``timeout``."""
        deadline = time.monotonic() + wait
        ttl_ms = int(self.ttl * 1000)
        waiter: Waiter | None = None
        waiter_token = ""
        try:
            while True:
                holder = self._guard("take a lease", lambda: self._connection().set(
                    name, token, nx=True, px=ttl_ms, get=True), _FAILED)
                if holder is _FAILED:
                    self._count("lease_failopen", 1)
                    return "open"
                if holder is None:
                    with self._lock:
                        self._held[name] = (token, time.monotonic())
                    self._wake.set()
                    self._count("leases_taken", 1)
                    return "held"
                holder_token = holder.decode() if isinstance(holder, bytes) else str(holder)
                if waiter is None or waiter_token != holder_token:
                    if waiter is not None:
                        waiter.close()
                    waiter, waiter_token = self._wakeups.expect(holder_token), holder_token
                    continue  # look once more now that we listen: a release in between counts
                left = deadline - time.monotonic()
                if left <= 0:
                    self._count("lease_timeouts", 1)
                    return "timeout"
                heard = waiter.wait(min(self.poll, left))
                if heard == "landed":
                    self._count("lease_wakeups", 1)
                    if waiter.announced_at is not None:  # the wake delay, for the figures
                        delay = max(0.0, time.time() - waiter.announced_at)
                        self._count("lease_wake_us", int(delay * 1e6))
                    return "landed"
        finally:
            if waiter is not None:
                waiter.close()

    def _release(self, key: str, name: str, token: str, outcome: str) -> None:
        """Release in the background: once the take has landed, delete our lease and wake
        the waiters. The keeper renews the lease until then."""
        def release() -> None:
            try:
                if outcome == "landed":
                    if not self._settle(key, SETTLE_SECONDS):
                        self._count("lease_settle_timeouts", 1)
                    self._wakeups.landed(key, token, outcome)  # waiters read it at once
                    self._delete(name, token)
                else:  # the lease first: the woken waiters try to take it
                    self._delete(name, token)
                    self._wakeups.landed(key, token, outcome)
            finally:
                self._forget(name, token)

        try:
            self._releases.submit(release)
        except RuntimeError:  # closing: release here
            release()

    def _delete(self, name: str, token: str) -> None:
        self._guard("release a lease", lambda: self._connection().eval(
            _RELEASE, 1, name, token), None)

    def _keep(self) -> None:
        while not self._stop:
            self._wake.clear()
            now = time.monotonic()
            period = self.ttl / 3
            with self._lock:
                due = [(name, token) for name, (token, at) in self._held.items()
                       if now - at >= period]
                soonest = min((at + period for _, at in self._held.values()),
                              default=now + period)
            for name, token in due:
                self._renew(name, token)
            self._wake.wait(max(0.01, soonest - time.monotonic()))

    def _renew(self, name: str, token: str) -> None:
        ttl_ms = str(int(self.ttl * 1000))
        with self._lock:
            if name in self._held and self._held[name][0] == token:
                self._held[name] = (token, time.monotonic())
        renewed = self._guard("renew a lease", lambda: self._connection().eval(
            _RENEW, 1, name, token, ttl_ms), None)
        if renewed == 0:  # expired and maybe taken by another node: we render on anyway
            self._count("leases_lost", 1)
            self._forget(name, token)

    def _forget(self, name: str, token: str) -> None:
        with self._lock:
            if name in self._held and self._held[name][0] == token:
                del self._held[name]

    def held(self) -> int:
        """Leases this process holds now."""
        with self._lock:
            return len(self._held)

    def close(self) -> None:
        """Finish pending releases, stop renewing."""
        self._releases.shutdown(wait=True)
        self._stop = True
        self._wake.set()
        self._keeper.join(timeout=5)
