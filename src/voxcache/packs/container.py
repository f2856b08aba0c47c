"""The pack file: a plain ustar archive, written with ``tarfile`` and read strictly.

Ordinary tools can look inside (``tar tf pack.vxpack``). Reading never hands the stream
to ``tarfile``: each 512-byte header is parsed by ``TarInfo.frombuf`` (checksum checked),
anything but a regular file is refused, every size is bounded (``MAX_MEMBER_BYTES``)
before use, the signed manifest says how many bytes a member may have before any is read,
and nothing is ever extracted by name. docs/operating/edge.md, "The pack format".
"""

from __future__ import annotations

import io
import tarfile
from typing import BinaryIO

from ..errors import InvalidParameter
from ..tiers.entry_files import MAX_ENTRY_BYTES

BLOCK = 512
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
MAX_SIGNATURE_BYTES = 4096
MAX_MEMBER_BYTES = MAX_ENTRY_BYTES
"""No member of a pack is larger: an entry is at most the disk tier's entry limit and the
manifest is capped lower still (``manifest.MAX_MANIFEST_BYTES``)."""
_READ_CHUNK = 1 << 20


class BadPack(InvalidParameter):
    """The file is not a pack this version can read, or it ends early."""


class PackWriter:
    """Writes members to a ustar stream (``out`` need not be seekable)."""

    def __init__(self, out: BinaryIO) -> None:
        self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
            fileobj=out, mode="w|", format=tarfile.USTAR_FORMAT)

    def add(self, name: str, data: bytes, mtime: float = 0.0) -> None:
        """Append one regular file (0600, owner-less, so the bytes do not depend on the host)."""
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = int(mtime)
        info.mode = 0o600
        self._tar.addfile(info, io.BytesIO(data))

    def close(self) -> None:
        """Write the end-of-archive blocks."""
        self._tar.close()


class PackReader:
    """Reads a pack member by member, never more bytes than the caller allows."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.offset = 0

    def next_member(self) -> tuple[str, int] | None:
        """(name, size) of the next member, or None at the end of the archive."""
        block = self._exactly(BLOCK, allow_end=True)
        if block is None or block == b"\0" * BLOCK:
            return None
        try:
            info = tarfile.TarInfo.frombuf(bytes(block), "utf-8", "strict")
        except (tarfile.HeaderError, UnicodeDecodeError, ValueError) as exc:
            raise BadPack(f"damaged archive header at byte {self.offset - BLOCK}: {exc}") \
                from None
        if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            raise BadPack(f"member {info.name!r} is not a regular file (type "
                          f"{info.type!r}); packs hold only regular files")
        if not 0 <= info.size <= MAX_MEMBER_BYTES:
            raise BadPack(f"member {info.name!r} at byte {self.offset - BLOCK} declares "
                          f"{info.size} bytes; a pack member has 0 to {MAX_MEMBER_BYTES}")
        return info.name, info.size

    def read(self, size: int) -> bytearray:
        """The current member's data (``size`` as its header said), then its padding."""
        data = self.read_data(size)
        self.skip_padding(size)
        return data

    def read_data(self, size: int) -> bytearray:
        """The current member's data only; ``skip_padding`` must follow (so a caller can use
        a member whose data arrived whole before a cut in its padding ends the read)."""
        data = self._exactly(size)
        assert data is not None
        return data

    def skip(self, size: int) -> None:
        """Pass over the current member's data without keeping it."""
        left = size
        while left:
            chunk = self._exactly(min(left, _READ_CHUNK))
            assert chunk is not None
            left -= len(chunk)
        self.skip_padding(size)

    def skip_padding(self, size: int) -> None:
        """Pass the zeros that fill a member's last block (anything else is damage)."""
        pad = -size % BLOCK
        if pad and self._exactly(pad) != b"\0" * pad:
            raise BadPack(f"damaged archive: the padding before byte {self.offset} is not "
                          "zeros")

    def _exactly(self, size: int, allow_end: bool = False) -> bytearray | None:
        """``size`` bytes (0 <= size <= MAX_MEMBER_BYTES, checked by every caller), read in
        chunks into one growing buffer: a cut file costs what it held, not what it claimed,
        and the whole is never held twice (a list of chunks joined at the end would be)."""
        if not 0 <= size <= MAX_MEMBER_BYTES:
            raise BadPack(f"refusing to read {size} bytes at byte {self.offset}")
        data, left = bytearray(), size
        while left:
            chunk = self._stream.read(min(left, _READ_CHUNK))
            if not chunk:
                if allow_end and left == size:
                    return None
                raise BadPack(f"the pack ends early (at byte {self.offset}); it was cut short "
                              "— fetch it again")
            data += chunk
            left -= len(chunk)
            self.offset += len(chunk)
        return data
