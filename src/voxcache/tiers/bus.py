"""News between nodes through Redis Streams: invalidations, and takes that landed.

Two streams under the deployment's prefix (one hash tag, one ``XREAD`` follows both):
``{bus}:events`` (delete, pin, unpin, revision, clear) and ``{bus}:landed`` (a lease's
outcome). Streams, not pub/sub: a node that lost touch replays from the id it last applied
and can prove it missed nothing — else it drops its memory tier and replays what the stream
holds onto its disk. No echo (each entry names its origin); publishing never fails a request
(a bounded outbox; overflow becomes one ``clear``). docs/operating/cluster.md, "Invalidation
everywhere".
"""

from __future__ import annotations

import collections
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fsmode import write_private
from .faults import FaultLog
from .leases import Guard, node_name

log = logging.getLogger("voxcache.bus")

EVENTS_KEPT = 50_000
LANDED_KEPT = 1_000
BLOCK_MS = 200
"""How long one ``XREAD`` waits for news (well below the Redis tier's 0.5 s socket timeout)."""
OUTBOX_MAX = 10_000
POSITION_FILE = "bus.position"
REPLAY_BATCH = 1_000
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 2.0
CHECK_SECONDS = 1.0
"""How often a quiet follower checks that its position is still in the stream."""
EVENTS = ("delete", "pin", "unpin", "revision", "clear")
_FAILED: Any = object()


@dataclass(frozen=True, slots=True)
class News:
    """One change another node made: ``event`` on ``subject`` (a key, or an engine id)."""

    event: str
    subject: str
    kind: str = ""
    """The entry's kind, for ``delete``."""
    until: float | None = None
    """When a ``pin`` ends (None: never)."""

    def fields(self, origin: str) -> dict[str, str]:
        return {"e": self.event, "s": self.subject, "k": self.kind,
                "u": "" if self.until is None else repr(self.until), "o": origin}

    @classmethod
    def parse(cls, fields: dict[Any, Any]) -> tuple[News, str] | None:
        """(news, origin) from a stream entry; None for anything voxcache does not write."""
        text = {_text(k): _text(v) for k, v in fields.items()}
        event, subject = text.get("e", ""), text.get("s", "")
        if event not in EVENTS or len(subject) > 200:
            return None
        try:
            until = float(text["u"]) if text.get("u") else None
        except ValueError:
            until = None
        return cls(event, subject, text.get("k", "")[:32], until), text.get("o", "")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _Waiter:
    """One lease waiter's interest in one holder's outcome."""

    def __init__(self, bus: Bus, token: str) -> None:
        self._bus = bus
        self.token = token
        self._arrived = threading.Event()
        self._outcome: str | None = None
        self.announced_at: float | None = None
        """When the holder announced its outcome (its clock, ``time.time()``)."""

    def heard(self, outcome: str, announced_at: float | None) -> None:
        self._outcome = outcome
        self.announced_at = announced_at
        self._arrived.set()

    def wait(self, timeout: float) -> str | None:
        if not self._arrived.wait(timeout):
            return None
        self._arrived.clear()
        return self._outcome

    def close(self) -> None:
        self._bus._forget(self)


class Bus:
    """Publish this process's news to every node; follow everyone else's."""

    def __init__(self, connection: Callable[[], Any], prefix: str, root: Path, *,
                 apply: Callable[[News], None], guard: Guard, faults: FaultLog,
                 count: Callable[[str, int], None], block_ms: int = BLOCK_MS) -> None:
        self.events_key = f"{prefix}{{bus}}:events"
        self.landed_key = f"{prefix}{{bus}}:landed"
        self.origin = f"{node_name()}/{secrets.token_hex(4)}"
        self._connection = connection
        self._position_path = Path(root) / POSITION_FILE
        self._apply = apply
        self._guard = guard
        self._faults = faults
        self._count = count
        self._block_ms = block_ms
        self._events_at: str | None = None
        self._landed_at = "0-0"
        self._checked = 0.0
        self.in_touch = False
        """True while the follower reads the streams and has proven it missed nothing."""
        self.last_error = ""
        self._outbox: collections.deque[News] = collections.deque()
        self._outbox_lock = threading.Lock()
        self._waiters: dict[str, list[_Waiter]] = {}
        self._waiters_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="voxcache-bus", daemon=True)
        self._thread.start()

    # -- publishing --------------------------------------------------------------
    def publish(self, news: Iterable[News]) -> None:
        """Send ``news`` to every node now, or as soon as Redis answers (outbox)."""
        batch = list(news)
        if not batch:
            return
        if self._send(batch) is _FAILED:
            self._hold(batch)

    def _send(self, batch: list[News]) -> Any:
        def send() -> None:
            pipe = self._connection().pipeline(transaction=False)
            for item in batch:
                pipe.xadd(self.events_key, item.fields(self.origin), maxlen=EVENTS_KEPT,
                          approximate=True)
            pipe.execute()

        return self._guard("publish news", send, _FAILED)

    def _hold(self, batch: list[News]) -> None:
        with self._outbox_lock:
            self._outbox.extend(batch)
            if len(self._outbox) > OUTBOX_MAX:  # news lost: make every node drop its memory
                lost = len(self._outbox)
                self._outbox.clear()
                self._outbox.append(News("clear", "outbox-overflow"))
                self._count("bus_news_lost", lost)
        self._count("bus_news_held", len(batch))

    def _flush_outbox(self) -> None:
        with self._outbox_lock:
            batch = list(self._outbox)
        if batch and self._send(batch) is not _FAILED:
            with self._outbox_lock:
                for _ in range(min(len(batch), len(self._outbox))):
                    self._outbox.popleft()

    # -- render leases' wake-ups -------------------------------------------------------
    def expect(self, token: str) -> _Waiter:
        """Listen for the outcome of the lease held by ``token``."""
        waiter = _Waiter(self, token)
        with self._waiters_lock:
            self._waiters.setdefault(token, []).append(waiter)
        return waiter

    def _forget(self, waiter: _Waiter) -> None:
        with self._waiters_lock:
            waiting = self._waiters.get(waiter.token, [])
            if waiter in waiting:
                waiting.remove(waiter)
            if not waiting:
                self._waiters.pop(waiter.token, None)

    def landed(self, key: str, token: str, outcome: str) -> None:
        """Tell every node that the lease ``token`` on ``key`` ended: ``landed`` (its take
        is in the shared tiers) or ``failed``. Best effort: waiters also poll."""
        self._guard("announce a landed take", lambda: self._connection().xadd(
            self.landed_key, {"s": key, "t": token, "r": outcome, "at": repr(time.time())},
            maxlen=LANDED_KEPT,
            approximate=True), None)

    def _wake(self, fields: dict[Any, Any]) -> None:
        text = {_text(k): _text(v) for k, v in fields.items()}
        try:
            announced_at: float | None = float(text.get("at", ""))
        except ValueError:
            announced_at = None
        with self._waiters_lock:
            waiting = list(self._waiters.get(text.get("t", ""), ()))
        for waiter in waiting:
            waiter.heard(text.get("r", ""), announced_at)

    # -- following -------------------------------------------------------------------
    def _follow(self) -> None:
        backoff = BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                if not self.in_touch:
                    self._catch_up()
                self._flush_outbox()
                self._read_once()
                backoff = BACKOFF_FIRST
            except Exception as exc:  # Redis away, or a bug: retried, never the end of news
                self.in_touch = False
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._faults.report("bus", exc, "the cross-node bus could not be read; "
                                    "retrying (news from other nodes waits)")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _read_once(self) -> None:
        assert self._events_at is not None
        connection = self._connection()
        reply = _streams(connection.xread({self.events_key: self._events_at,
                                           self.landed_key: self._landed_at},
                                          count=REPLAY_BATCH, block=self._block_ms))
        for stream, entries in reply:
            if stream == self.landed_key and entries:
                self._landed_at = _text(entries[-1][0])
                for _, fields in entries:
                    self._wake(fields)
        news = [entries for stream, entries in reply if stream == self.events_key and entries]
        now = time.monotonic()
        if news or now - self._checked > CHECK_SECONDS:
            # The client reconnects on its own: a Redis that restarted empty (or a failover
            # that lost the newest entries) looks like a quiet stream, and new entries would
            # look like the next ones. So before applying news, and every CHECK_SECONDS,
            # the entry we stopped at must still be there.
            self._checked = now
            if not self._holds(connection, self._events_at):
                self.in_touch = False  # the next round catches up (drop, replay)
                return
        for entries in news:
            self._handle(entries)

    def _holds(self, connection: Any, position: str) -> bool:
        """Whether the stream still holds the entry at ``position`` (``0-0``: nothing read
        yet, nothing to lose)."""
        return position == "0-0" or bool(connection.xrange(self.events_key, position,
                                                            position, count=1))

    def _handle(self, entries: list[Any]) -> None:
        for entry_id, fields in entries:
            parsed = News.parse(fields)
            if parsed is not None and parsed[1] != self.origin:
                self._applied(parsed[0])
            self._events_at = _text(entry_id)
        self._save_position()

    def _applied(self, news: News) -> None:
        try:
            self._apply(news)
            self._count("bus_news_applied", 1)
        except Exception as exc:  # one bad application must not stop the others
            self._faults.report("bus apply", exc, f"news {news.event} could not be applied")

    def _catch_up(self) -> None:
        """After a start or a lost connection: go on from the last entry applied if it is
        still in the stream (nothing was missed), else drop memory and replay the stream."""
        connection = self._connection()
        position = self._events_at or self._saved_position()
        if position is not None and self._holds(connection, position):
            self._events_at = position
        else:
            if position is not None:  # None: a first start; the replay below is enough
                log.warning("bus: cannot prove no news was missed (entry %s is gone from %s): "
                            "dropping the memory tier and replaying the stream onto disk",
                            position, self.events_key)
                self._count("bus_gaps", 1)
                self._applied(News("clear", "bus-gap"))
            self._events_at = "0-0"
            while True:
                entries = connection.xrange(self.events_key, f"({self._events_at}"
                                            if self._events_at != "0-0" else "-", "+",
                                            count=REPLAY_BATCH)
                if not entries:
                    break
                self._handle(entries)
        latest = connection.xrevrange(self.landed_key, "+", "-", count=1)
        self._landed_at = _text(latest[0][0]) if latest else "0-0"
        self.in_touch = True
        self._save_position()

    def _saved_position(self) -> str | None:
        try:
            saved = json.loads(self._position_path.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(saved, dict) or saved.get("stream") != self.events_key:
            return None
        position = saved.get("id")
        return position if isinstance(position, str) and _is_id(position) else None

    def _save_position(self) -> None:
        if self._events_at in (None, "0-0"):
            return
        try:
            write_private(self._position_path, json.dumps(
                {"stream": self.events_key, "id": self._events_at}).encode())
        except OSError as exc:
            self._faults.report("bus position", exc, "the bus position could not be kept; a "
                                "restart will replay the stream")

    def health(self) -> dict[str, Any]:
        """``ok`` while following (and proven complete), ``down`` otherwise, and the outbox."""
        with self._outbox_lock:
            held = len(self._outbox)
        state = {"state": "ok" if self.in_touch else "down", "outbox": held}
        if not self.in_touch and self.last_error:
            state["detail"] = self.last_error
        return state

    def close(self) -> None:
        """Stop following; send what the outbox holds if Redis answers."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self._outbox:
            self._flush_outbox()


def _streams(reply: Any) -> list[tuple[str, list[Any]]]:
    """XREAD's reply as (stream, entries) pairs (RESP2 lists or RESP3 maps)."""
    if not reply:
        return []
    pairs = reply.items() if isinstance(reply, dict) else reply
    return [(_text(stream), list(entries or [])) for stream, entries in pairs]


def _is_id(text: str) -> bool:
    head, _, tail = text.partition("-")
    return head.isdigit() and tail.isdigit()

