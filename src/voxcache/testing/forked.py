"""The tests' Python processes, forked from one that imported voxcache, FastAPI and uvicorn.

A test's ``voxcache`` process spent ~0.6 CPU-s importing them before its first line of work,
and the suite starts hundreds. ``popen``/``run`` take ``subprocess.Popen``/``run``'s
arguments: ``python -m voxcache …``, ``python -c CODE …`` and ``python FILE.py …`` are forked
from a *zygote* that imported those once, anything a fork cannot honour is a subprocess
(docs/internals/testing.md). The child runs the program as the interpreter would, with the
caller's arguments, environment, folder and descriptors, in a process of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from collections.abc import Mapping, Sequence
from typing import IO, Any, NoReturn

MODULES = ("voxcache", "voxcache.cli")
"""``python -m`` targets that are forked (as are ``python -c CODE`` and ``python FILE.py``)."""
PRELOAD = ("voxcache.cli", "voxcache.runtime", "voxcache.service.app",
           "voxcache.service.options", "voxcache.service.protocol", "voxcache.engines.tone",
           "uvicorn", "uvicorn.main", "httpx")
"""What a ``voxcache serve`` imports before it answers (each fork finds them imported)."""
FORKABLE = {"stdin", "stdout", "stderr", "env", "cwd", "text", "start_new_session"}
"""The ``Popen`` arguments a fork honours; any other sends the command to a subprocess."""


def _read_at_start(name: str) -> bool:
    """Variables the interpreter, or a module it imports, reads once as it starts: a fork
    would keep the zygote's reading (``voxcache.formats`` looks for ffmpeg on ``PATH``)."""
    return name == "PATH" or name.startswith(("PYTHON", "OPENBLAS", "OMP_", "MKL_", "LD_",
                                              "MALLOC_"))


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if _read_at_start(k)}


class ForkedProcess:
    """What a test uses of ``subprocess.Popen``, for a child of the zygote: its pid is real
    (signals reach it), its exit status comes from the zygote, which reaps it."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int,
                 pipes: dict[str, IO[Any] | None]) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin, self.stdout, self.stderr = pipes["stdin"], pipes["stdout"], pipes["stderr"]
        self._conn = conn
        self._lock = threading.Lock()

    def _status(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                self._conn.settimeout(timeout)
                try:
                    data = self._conn.recv(64)
                except (TimeoutError, BlockingIOError):
                    return None
                # the zygote's raw wait status; nothing (it died) reads as killed
                status = int(data) if data else signal.SIGKILL
                self.returncode = os.waitstatus_to_exitcode(status)
                self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # reaped: its pid may be another process's by now
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their ends, wait for the exit."""
        read: dict[str, Any] = {}
        readers = [threading.Thread(target=lambda n=name, s=stream: read.__setitem__(n, s.read()),
                                    daemon=True)
                   for name, stream in (("out", self.stdout), ("err", self.stderr)) if stream]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(timeout)
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return read.get("out"), read.get("err")

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class _Zygote:
    """The client's end: the zygote process, started on first use, gone with this one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""
        self.startup: dict[str, str] | None = None
        """What of its environment the zygote read as it started (``_read_at_start``)."""

    def connect(self) -> socket.socket:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self._path)
        return conn

    def _start(self) -> None:
        self._path = os.path.join(tempfile.mkdtemp(prefix="vx-zygote-"), "socket")
        alive_r, alive_w = os.pipe()  # EOF on alive_r: this process is gone
        self.startup = _startup_env(os.environ)
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, self._path, str(alive_r)], pass_fds=[alive_r],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        os.close(alive_r)
        atexit.register(os.close, alive_w)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if line != b"ready\n":
            raise RuntimeError(f"the voxcache zygote did not start: {line!r}")


_ZYGOTE = _Zygote()


def _program(cmd: Any) -> dict[str, Any] | None:
    """What the command runs, as the zygote's child takes it; None: not a plain ``python
    -m voxcache``, ``python -c CODE`` or ``python FILE.py`` (interpreter options, …)."""
    if not isinstance(cmd, list | tuple) or len(cmd) < 2 or cmd[0] != sys.executable:
        return None
    first, rest = os.fspath(cmd[1]), [os.fspath(arg) for arg in cmd[2:]]
    if first == "-m" and rest and rest[0] in MODULES:
        return {"module": rest[0], "args": rest[1:]}
    if first == "-c" and rest:
        return {"code": rest[0], "args": rest[1:]}
    if first.endswith(".py"):
        return {"path": os.path.abspath(first), "args": rest}
    return None


def _forkable(kwargs: Mapping[str, Any]) -> bool:
    """Whether a fork honours these ``Popen`` arguments (the program is one, ``_program``)."""
    if not set(kwargs) <= FORKABLE or kwargs.get("stdin") not in (None, subprocess.DEVNULL):
        return False  # (no test writes to a voxcache command's stdin)
    env = kwargs.get("env")
    started = _ZYGOTE.startup if _ZYGOTE.startup is not None else _startup_env(os.environ)
    return env is None or _startup_env(env) == started


def _streams(kwargs: Mapping[str, Any]) -> tuple[list[int], list[int], dict[str, Any]]:
    """The child's stdin, stdout and stderr as descriptors to send; those opened here (closed
    once sent); the caller's ends of the pipes, as ``Popen`` keeps them."""
    keep: dict[str, Any] = dict.fromkeys(("stdin", "stdout", "stderr"))
    send: list[int] = []
    opened: list[int] = []
    for number, name in enumerate(keep):
        how = kwargs.get(name)
        if how is None:
            send.append(number)
        elif how == subprocess.PIPE:
            mine, theirs = os.pipe()
            keep[name] = (os.fdopen(mine, encoding="utf-8") if kwargs.get("text")
                          else os.fdopen(mine, "rb"))
            send.append(theirs)
            opened.append(theirs)
        elif how == subprocess.DEVNULL:
            opened.append(os.open(os.devnull, os.O_RDWR))
            send.append(opened[-1])
        elif how == subprocess.STDOUT and name == "stderr":
            send.append(send[1])
        else:
            send.append(how if isinstance(how, int) else how.fileno())
    return send, opened, keep


def popen(cmd: Sequence[str], **kwargs: Any) -> Any:
    """``subprocess.Popen(cmd, **kwargs)``, forked from the zygote where it can be."""
    return _forked(cmd, kwargs) or subprocess.Popen(cmd, **kwargs)


def run(cmd: Sequence[str], *, capture_output: bool = False, timeout: float | None = None,
        check: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, …)``, forked from the zygote where it can be."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process = _forked(cmd, kwargs)
    if process is None:
        return subprocess.run(cmd, timeout=timeout, check=check, **kwargs)
    with process:
        try:
            out, err = process.communicate(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    done = subprocess.CompletedProcess(list(cmd), process.wait(), out, err)
    if check:
        done.check_returncode()
    return done


def _forked(cmd: Sequence[str], kwargs: Mapping[str, Any]) -> ForkedProcess | None:
    """The command as a child of the zygote; None when it must be a subprocess instead."""
    program = _program(cmd)
    if program is None or not _forkable(kwargs):
        return None
    send, opened, keep = _streams(kwargs)
    env = kwargs.get("env")
    request = {**program, "env": dict(os.environ if env is None else env),
               "cwd": os.fspath(kwargs.get("cwd") or os.getcwd()),
               "new_session": bool(kwargs.get("start_new_session"))}
    conn = _ZYGOTE.connect()
    try:
        socket.send_fds(conn, [json.dumps(request).encode()], send)
        pid = int(conn.recv(64))
    finally:
        for fd in opened:
            os.close(fd)
    return ForkedProcess(list(cmd), conn, pid, keep)


# -- the zygote ------------------------------------------------------------------------------
def _zygote(path: str, alive: int) -> None:
    """Import, listen, fork a child per connection, tell each connection its child's pid
    and then its wait status; exit (killing what is left) when the client is gone."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork keeps only the forking thread
        raise RuntimeError(f"the zygote runs threads after its imports: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    for source in (listener, wake_r, alive):
        selector.register(source, selectors.EVENT_READ)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                pid = _fork(conn, [listener, *children.values()], [wake_r, wake_w, alive])
                children[pid] = conn
            elif key.fileobj == wake_r:
                os.read(wake_r, 4096)
                _reap(children)
            else:  # the client is gone: so are its children, its socket and its folder
                for pid in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                os.unlink(path)
                os.rmdir(os.path.dirname(path))
                return


def _fork(conn: socket.socket, sockets: list[socket.socket], fds: list[int]) -> int:
    """Fork the child a connection asks for; tell the connection its pid."""
    data, given, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    pid = os.fork()
    if pid == 0:  # the zygote's own sockets and pipes are not the command's
        for held in sockets:
            held.close()
        for fd in fds:
            os.close(fd)
        _child(json.loads(data), given, conn)
    for fd in given:
        os.close(fd)
    conn.send(str(pid).encode())
    return pid


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(str(status).encode())
            conn.close()


def _child(request: dict[str, Any], fds: list[int], conn: socket.socket) -> NoReturn:
    """In the fork: become the command (``python -m MODULE``, ``-c CODE`` or ``FILE.py``,
    then its arguments) and exit as it would."""
    conn.close()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    code = 0
    try:
        _run(request)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:  # what the interpreter prints: the program's frames
        frames = exc.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename == __file__:
            frames = frames.tb_next
        traceback.print_exception(type(exc), exc, frames)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's wait for non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _run(request: dict[str, Any]) -> None:
    """Run the program as the interpreter would: argv, ``sys.path[0]`` and ``__main__``."""
    args = request["args"]
    if "module" in request:
        sys.argv, sys.path[0] = ["-m", *args], os.getcwd()  # runpy sets argv[0] to the file
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    elif "code" in request:
        sys.argv, sys.path[0] = ["-c", *args], ""
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(request["code"], "<string>", "exec"), main.__dict__)
    else:
        sys.argv, sys.path[0] = [request["path"], *args], os.path.dirname(request["path"])
        runpy.run_path(request["path"], run_name="__main__")


if __name__ == "__main__":
    _zygote(sys.argv[1], int(sys.argv[2]))
