"""Reading a stored file without trusting what sits at its path.

Entry paths follow from keys, so anyone who can write in the cache folder could
plant something there: a symlink to ``/etc/passwd``, a FIFO, a folder, a huge
file. ``read_entry_file`` only ever reads a regular file of sane size, decided on
the opened descriptor, so nothing can be swapped in between the check and the
read. What it refuses is quarantined by the caller like a corrupt entry.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_ENTRY_BYTES = 1 << 30
"""No take is this large (5,000 characters of speech at 48 kHz stereo is ~100 MB); a file
over it at an entry path is not ours, and reading it whole could exhaust memory."""
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotAnEntryFile(Exception):
    """Something other than a regular file of sane size sits at an entry path."""


def read_entry_file(path: str) -> bytes:
    """Read a stored file whole, refusing anything but a regular file of sane size.

    ``O_NOFOLLOW`` refuses a symlink planted at the entry path (ELOOP), ``O_NONBLOCK``
    keeps a FIFO from hanging the reader, and ``fstat`` on the opened descriptor (not
    the path) decides, so nothing can be swapped in between the check and the read.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAnEntryFile("a symlink at an entry path") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAnEntryFile("not a regular file at an entry path")
        if info.st_size > MAX_ENTRY_BYTES:
            raise NotAnEntryFile(f"{info.st_size} bytes at an entry path, over the limit")
        size = info.st_size
        data = os.read(fd, size)
        while len(data) < size:  # a short read (signal, odd filesystem): keep going
            more = os.read(fd, size - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)
