"""Who has a cache folder open (``sessions/`` records): a start tells a clean stop from a crash.

The start-up walk (``lifecycle.reconcile``, ~12 s at a million entries) is needed only after
a crash, so each process that opens the disk tier writes ``sessions/<pid>-<token>.json``
(``O_EXCL``, 0600) and removes it on a clean close; a start walks only when a record's
process is gone or cannot be told apart (boot id and start time must match), or the folder
was never walked (``sessions/walked``). A record from before the last boot means a power
cut (``StartState.rebooted``): the inline store is not trusted then. docs/internals/design.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import socket
import stat
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ..fsmode import FILE_MODE, locked, private_dirs

log = logging.getLogger("voxcache.disk")

FOLDER = "sessions"
WALKED = "walked"
"""Written when a start-up walk finished: the folder has been consistent since, unless a
record of a dead process says otherwise."""
WALK_LOCK = "walk.lock"
"""Held (in ``locks/``) while a walk runs, so processes starting together walk once."""
MAX_RECORD_BYTES = 4096
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class StartState:
    """What the records said when this process opened the folder."""

    walk_reason: str | None
    """Why the folder must be walked; None when it is known consistent."""
    dead: tuple[Path, ...] = ()
    """Records of processes that did not close cleanly: removed once a walk has finished."""
    rebooted: bool = False
    """A record from before the last boot: the machine went down with the folder in use."""
    new: bool = False
    """The folder was missing or empty: there is nothing in it to reconcile."""


@dataclass
class _Identity:
    pid: int
    boot: str
    started: str
    host: str
    unclean: bool = False
    """Set when the process closed the folder owing the index rows: a crash, to a start."""

    @classmethod
    def of_this_process(cls) -> _Identity:
        pid = os.getpid()
        return cls(pid, boot_id(), start_time(pid), socket.gethostname())

    def to_json(self) -> bytes:
        return json.dumps({"pid": self.pid, "boot": self.boot, "started": self.started,
                           "host": self.host, "unclean": self.unclean},
                          sort_keys=True).encode()


@dataclass
class Session:
    """This process's record in one folder; ``end(clean=True)`` removes it."""

    root: Path
    path: Path | None
    identity: _Identity
    _ended: bool = field(default=False, repr=False)

    def end(self, clean: bool) -> None:
        """Remove the record if this process leaves the folder consistent; keep it (the
        next start walks) when it could not flush what it owes the index."""
        if self._ended:
            return
        self._ended = True
        _LIVE.discard(self)
        if self.path is None or self.identity.pid != os.getpid():
            return  # a forked child never removes its parent's record
        if clean:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        log.warning("disk tier: closed with rows it could not write to the index; the next "
                    "start checks the folder")
        self.identity.unclean = True  # dead to the next start, even while this process lives
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                os.write(fd, self.identity.to_json())
            finally:
                os.close(fd)

    def __hash__(self) -> int:
        return id(self)


_LIVE: weakref.WeakSet[Session] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def begin(root: Path) -> tuple[Session, StartState]:
    """Read the other processes' records, then write this process's own.

    The state is read first, so this process's record never counts against it. A folder
    that was missing or empty has nothing to reconcile: it is marked checked at once (a
    walk would only race this process's first writes)."""
    folder = root / FOLDER
    new_folder = _missing_or_empty(root)
    identity = _Identity.of_this_process()
    try:
        private_dirs(folder)
    except OSError:  # not a usable folder: the disk tier says so, naming --cache-dir
        return Session(root, None, identity), StartState("the folder cannot hold records")
    state = start_state(root)
    session = Session(root, _write_record(folder, identity), identity)
    if session.path is None:  # cannot vouch for this session: make the next start walk
        with contextlib.suppress(OSError):
            os.unlink(folder / WALKED)
    elif new_folder:
        with contextlib.suppress(OSError):
            finish_walk(root, state)
            state = StartState(None, new=True)
    with _LIVE_LOCK:
        _LIVE.add(session)
    return session, state


def start_state(root: Path, because: str | None = None) -> StartState:
    """Whether the folder must be walked, and which records a finished walk clears
    (``because``: a reason to walk the caller already has)."""
    folder = root / FOLDER
    me = _Identity.of_this_process()
    dead: list[Path] = []
    rebooted = False
    unsure = False
    for path in _records(folder):
        verdict = _verdict(path, me)
        if verdict == "alive":
            continue
        if verdict == "elsewhere":
            unsure = True  # another host's process: neither alive nor dead to us
            continue
        dead.append(path)
        rebooted = rebooted or verdict == "rebooted"
    reason: str | None
    if dead:
        reason = f"{len(dead)} process(es) did not close the folder cleanly"
    elif unsure:
        reason = "a process on another host has the folder open"
    elif not os.path.lexists(folder / WALKED):
        reason = "the folder has not been checked since records were kept"
    else:
        reason = because
    return StartState(reason, tuple(dead), rebooted)


def _missing_or_empty(root: Path) -> bool:
    try:
        with os.scandir(root) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True
    except OSError:
        return False  # not a folder we can read: the disk tier says why


def mark_unchecked(root: Path) -> None:
    """The folder is known inconsistent (a walk is due): until a walk finishes, every
    start walks."""
    with contextlib.suppress(OSError):
        os.unlink(root / FOLDER / WALKED)


def finish_walk(root: Path, state: StartState) -> None:
    """After a walk: clear the dead records it covered and mark the folder consistent."""
    for path in state.dead:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    fd = os.open(root / FOLDER / WALKED, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
                 | os.O_NOFOLLOW, FILE_MODE)
    os.close(fd)


def walk_lock(root: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``locks/walk.lock``: one walk at a time per folder (the kernel drops it if the
    walker dies)."""
    return locked(root / "locks" / WALK_LOCK)


def _records(folder: Path) -> list[Path]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [folder / name for name in names if name.endswith(".json")]


def _verdict(path: Path, me: _Identity) -> str:
    """``alive``, ``dead``, ``rebooted`` (dead since before this boot) or ``elsewhere``."""
    record = _read_record(path)
    if record is None:
        return "dead"  # torn by a crash mid-write, or planted: walk
    if record.host != me.host:
        return "elsewhere"
    if record.boot != me.boot:
        return "rebooted"
    if record.unclean:
        return "dead"  # it closed owing the index rows
    if record.pid == me.pid:
        return "alive" if record.started == me.started else "dead"
    return "alive" if start_time(record.pid) == record.started else "dead"


def _read_record(path: Path) -> _Identity | None:
    """A record's identity, or None for anything that is not a record voxcache wrote
    (read without following a symlink: nothing outside the folder is ever read)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            return None
        data = json.loads(os.read(fd, MAX_RECORD_BYTES))
        identity = _Identity(int(data["pid"]), str(data["boot"]), str(data["started"]),
                             str(data["host"]), data.get("unclean") is not False)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    finally:
        os.close(fd)
    return identity


def _write_record(folder: Path, identity: _Identity) -> Path | None:
    path = folder / f"{identity.pid}-{secrets.token_hex(4)}.json"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        log.warning("disk tier: cannot record this process in %s (%s); the next start "
                    "checks the whole folder", folder, os.strerror(exc.errno or errno.EIO))
        return None
    try:
        os.write(fd, identity.to_json())
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    os.close(fd)
    return path


def boot_id() -> str:
    """This boot of the machine (Linux); empty where the kernel does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as source:
            return source.read().strip()
    except OSError:
        return ""


def start_time(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot ("" when it is not running;
    "?" when it runs but this kernel does not say when it started)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as source:
            fields = source.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except FileNotFoundError:
        return ""
    except (OSError, IndexError):
        pass
    return "?" if alive(pid) else ""


def alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (signal 0: one that exists
    but belongs to another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _after_fork_in_child() -> None:
    """A forked child shares its parent's open tiers: give it records of its own, so its
    crash is seen too (and ``end`` never removes the parent's: the pid differs)."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()  # another thread of the parent may have held it
    for session in list(_LIVE):
        session.identity = _Identity.of_this_process()
        session.path = _write_record(session.root / FOLDER, session.identity)


os.register_at_fork(after_in_child=_after_fork_in_child)
