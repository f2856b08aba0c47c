"""CPU seconds a server spent, from /proc: a figure the host's other load cannot move much.

On a shared host a server's requests/s is whatever share of the cores it got; requests per
CPU-second it consumed is what it costs. The server's processes are found by the listening
socket they hold (uvicorn's workers and nginx's share their parent's), so no pid is needed.
"""

from __future__ import annotations

import os
from pathlib import Path


def listening_inode(port: int) -> str | None:
    """The socket inode listening on 127.0.0.1:``port`` (IPv4), from /proc/net/tcp."""
    want = f"0100007F:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if fields[1] == want and fields[3] == "0A":  # LISTEN
            return fields[9]
    return None


def holders(port: int) -> list[int]:
    """Every process holding the socket listening on ``port`` (empty when unknown)."""
    inode = listening_inode(port)
    if inode is None:
        return []
    target, found = f"socket:[{inode}]", []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd.path) == target for fd in os.scandir(f"{entry.path}/fd")):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds the threads of ``pids`` have run so far, to the nanosecond (each
    thread's ``schedstat``; the clock-tick ``stat`` fields are 10 ms coarse, too coarse
    for a few seconds' trial). A thread or process gone counts 0."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9
