"""A writer for the crash test: stores large entries in a loop until killed."""

from __future__ import annotations

import sys

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.entry import audio_entry


def payload(i: int) -> bytes:
    """Content that can be checked from the key number alone (about 1 MB)."""
    return i.to_bytes(2, "little") * 500_000


def main() -> None:
    cache = Cache(sys.argv[1])
    print("ready", flush=True)
    i = int(sys.argv[2])
    while True:
        cache.put(audio_entry(f"{i:064x}", Audio(payload(i), 16000)))
        i += 1


if __name__ == "__main__":
    main()
