"""Keys as the command line takes them: the full key or a unique prefix, like git's hashes.

A key is 64 hex digits, too long to type and too long for a table, so ``ls``
prints each key shortened to a prefix no other stored key shares, and every
command that takes a key accepts such a prefix back. A prefix must have at
least ``MIN_PREFIX`` digits (fewer would match by accident in any real cache);
one that matches several entries is refused with the candidates listed, never
resolved to one of them. The index is the list of what is stored (it is
reconciled with the files whenever a cache is opened).
"""

from __future__ import annotations

import os
import re

from ..errors import InvalidParameter, NotFound
from ..tiers.index import Index, IndexRow

MIN_PREFIX = 4
"""Fewest hex digits accepted as a key prefix."""
SHORT_LENGTH = 12
"""Digits ``ls`` prints at least: 48 bits, so a longer form is rarely needed."""
CANDIDATES_SHOWN = 5
"""Candidates an ambiguous prefix lists."""

_HEX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},64}}")


def resolve_key(index: Index, given: str) -> IndexRow:
    """The one stored entry whose key is ``given`` or starts with it.

    Raises InvalidParameter for something that is not a key prefix or matches
    several entries (the caller must type more), NotFound when nothing matches.
    """
    prefix = given.strip().lower()
    if not _HEX.fullmatch(prefix):
        raise InvalidParameter(
            f"{given!r} is not a key: give the full key or at least {MIN_PREFIX} of its "
            "leading hex digits (as `voxcache ls` prints them)")
    # Keys are lowercase hex, so every key starting with ``prefix`` sorts between it and
    # ``prefix + "g"``: a range over the primary key, not a scan.
    bounds = [prefix, prefix + "g"]
    rows = index.rows("key >= ? AND key < ?", bounds, order="key", limit=CANDIDATES_SHOWN)
    if not rows:
        raise NotFound(f"no stored entry has a key starting with {prefix}"
                       if len(prefix) < 64 else f"no stored entry has the key {prefix}")
    if len(rows) == 1:
        return rows[0]
    (total,), = index.query("SELECT count(*) FROM entries WHERE key >= ? AND key < ?", bounds)
    listed = "\n".join(f"  {short_key(index, r.key)}  {r.kind:<7} {r.text[:60]!r}"
                       for r in rows)
    more = f"\n  … and {total - len(rows)} more" if total > len(rows) else ""
    raise InvalidParameter(f"key prefix {prefix} is ambiguous: it starts {total} stored keys; "
                           f"type more of the key:\n{listed}{more}")


def short_key(index: Index, key: str, minimum: int = SHORT_LENGTH) -> str:
    """The shortest prefix of ``key`` (at least ``minimum`` digits) no other stored key has.

    Only the two keys beside ``key`` in sorted order can share its longest common
    prefix, so two indexed look-ups decide it.
    """
    before = index.query("SELECT key FROM entries WHERE key < ? ORDER BY key DESC LIMIT 1",
                         [key])
    after = index.query("SELECT key FROM entries WHERE key > ? ORDER BY key LIMIT 1", [key])
    shared = max((len(os.path.commonprefix([key, row[0]])) for row in (*before, *after)),
                 default=0)
    return key[:max(minimum, shared + 1)]
