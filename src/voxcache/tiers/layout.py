"""Where things live inside a cache folder — the one place that knows the layout.

``objects/ab/cd/<key>.wav`` is stable and computable from the key alone, so a
file server (nginx ``try_files``) can serve stored entries without Python.
Pins are marker files under ``pins/`` so that they survive an index rebuild.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

from ..fsmode import write_private

TEMP_PREFIX = ".tmp-"
STALE_TEMP_SECONDS = 600.0
SUBFOLDERS = ("objects", "quarantine", "locks", "pins")


SUFFIXES = {"audio": ".wav", "embedding": ".safetensors", "prompt": ".safetensors",
            "tokens": ".safetensors", "session": ".safetensors", "voice": ".safetensors"}
"""File suffix by artifact kind: each kind is stored as the standard file it is (a WAV; a
safetensors file with the envelope in ``__metadata__``); other kinds use ``.vxc``."""
OTHER_SUFFIX = ".vxc"
_KNOWN_SUFFIXES = {*SUFFIXES.values(), OTHER_SUFFIX}


_SET_ASIDE = itertools.count()


def aside(root: Path, name: str, now: float | None = None) -> Path:
    """Where ``name`` is kept in ``quarantine/`` (``name.<aside_stamp>``)."""
    return root / "quarantine" / f"{name}.{aside_stamp(now)}"


def aside_stamp(now: float | None = None) -> str:
    """The second, this process and its own count: nothing set aside replaces what was set
    aside before (with three random bytes instead, a CI run lost one of 340 bad records set
    aside within seconds: the second draw of a name replaced the first)."""
    return f"{int(time.time() if now is None else now)}-{os.getpid()}-{next(_SET_ASIDE)}"


def suffix_of(kind: str) -> str:
    """The file suffix entries of ``kind`` are stored under."""
    return SUFFIXES.get(kind, OTHER_SUFFIX)


def entry_path(root: Path, key: str, kind: str) -> Path:
    """Return where an entry lives."""
    return Path(entry_file(f"{root}/objects", key, kind))


def entry_file(objects: str, key: str, kind: str) -> str:
    """Where an entry lives, as a string under the ``objects`` folder: the form the read and
    write paths use, since four ``Path`` joins cost more than the stat they name."""
    return f"{objects}/{key[:2]}/{key[2:4]}/{key}{suffix_of(kind)}"


def kind_of_file(name: str) -> str | None:
    """Return 'audio' or 'other' for a published object file name, None for anything else."""
    if name.startswith(TEMP_PREFIX) or len(name) < 68 or name[64:] not in _KNOWN_SUFFIXES:
        return None
    return "audio" if name.endswith(".wav") else "other"


def pin_path(root: Path, key: str) -> Path:
    """Return the marker file that records a pin."""
    return Path(pin_file(root, key))


def pin_file(root: Path | str, key: str) -> str:
    """``pin_path`` as a string: what the memory tier stats on every put."""
    return f"{root}/pins/{key}"


def read_pin(root: Path, key: str) -> tuple[bool, float | None]:
    """Return (pinned, pin_until) from the marker file."""
    try:
        data = json.loads(pin_path(root, key).read_text())
    except (OSError, ValueError):
        return False, None
    return True, data.get("until")


def write_pin(root: Path, key: str, pinned: bool, until: float | None) -> None:
    """Create or remove the pin marker."""
    path = pin_path(root, key)
    if pinned:
        write_private(path, json.dumps({"until": until}).encode())
    else:
        path.unlink(missing_ok=True)
