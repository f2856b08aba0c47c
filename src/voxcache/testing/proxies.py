"""TCP proxies for faults the servers themselves cannot make: a slow Redis, a cut link.

    with SlowRedisProxy(redis_server.port, delay=0.8, match=b":lease") as proxy: proxy.url
    with TcpProxy(s3_server.port) as link: link.endpoint; link.blocked = True

``SlowRedisProxy`` holds each command whose arguments contain ``match`` for ``delay``
seconds (later commands on the connection queue behind it, as on a slow link), so a
client that times out leaves a command that still runs late; it counts commands by name.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from typing import Any

from .servers import free_port


class TcpProxy:
    """A byte pump in front of a server on loopback, in a thread of its own."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.port = free_port()
        self._blocked = False
        self._open: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def blocked(self) -> bool:
        """While True, open connections are cut and new ones closed at once."""
        return self._blocked

    @blocked.setter
    def blocked(self, value: bool) -> None:
        self._blocked = value
        if value:
            asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(10)

    async def _cut(self) -> None:
        for writer in list(self._open):
            writer.close()

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._blocked:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._open.update((writer, up_writer))
        replies = asyncio.ensure_future(_pump(up_reader, writer))
        try:
            await self._forward(reader, up_writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            replies.cancel()
            for stream in (up_writer, writer):
                self._open.discard(stream)
                with contextlib.suppress(Exception):
                    stream.close()

    async def _forward(self, reader: asyncio.StreamReader, up: asyncio.StreamWriter) -> None:
        """Client to server: as it comes."""
        await _pump(reader, up)


class SlowRedisProxy(TcpProxy):
    """A TCP proxy in front of redis-server that delays matching commands."""

    def __init__(self, target_port: int, *, delay: float, match: bytes = b"",
                 host: str = "127.0.0.1") -> None:
        super().__init__(target_port, host)
        self.delay = delay
        self.match = match
        self.delayed = 0
        """Commands held so far."""
        self.commands: collections.Counter[str] = collections.Counter()
        """Commands that went through, by name (lower case): round trips, as a client sent
        them (a script's own calls inside Redis are not counted)."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def _forward(self, reader: asyncio.StreamReader, up: asyncio.StreamWriter) -> None:
        """Client to server, one whole command at a time, the matching ones late."""
        while True:
            command = await _command(reader)
            if command is None:
                return
            self.commands[_name(command)] += 1
            if self.delay > 0 and self.match in command:
                self.delayed += 1
                await asyncio.sleep(self.delay)
            up.write(command)
            await up.drain()


def _name(command: bytes) -> str:
    """The command's name (``get``, ``set``, ``eval``…)."""
    if not command.startswith(b"*"):
        return command.split(b" ", 1)[0].strip().decode("ascii", "replace").lower()
    lines = command.split(b"\r\n", 3)
    return lines[2].decode("ascii", "replace").lower() if len(lines) > 2 else "?"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


async def _command(reader: asyncio.StreamReader) -> bytes | None:
    """One whole RESP command (an array of bulk strings) as its raw bytes; None at EOF."""
    head = await reader.readline()
    if not head:
        return None
    if not head.startswith(b"*"):  # an inline command: one line
        return head
    parts = [head]
    for _ in range(int(head[1:].strip())):
        length_line = await reader.readline()
        parts.append(length_line)
        parts.append(await reader.readexactly(int(length_line[1:].strip()) + 2))
    return b"".join(parts)
