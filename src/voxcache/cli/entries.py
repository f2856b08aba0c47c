"""Commands over stored entries by key: ls, pin, unpin, gc, and ``explain --key``.

Every key these commands take may be a unique prefix (``keys.resolve_key``) and
every key they print is one (``keys.short_key``), so what ``ls`` shows can be
pasted into the next command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from ..entry import CorruptEntry, decode
from ..errors import NotFound
from ..policies.usage import DB_NAME as USAGE_DB
from ..runtime import open_cache
from ..tiers.entry_files import NotAnEntryFile
from ..tiers.index import IndexRow
from ..tiers.lifecycle import rebuild_index, reconcile
from .common import print_json, read_only_db, settings_from
from .keys import resolve_key, short_key
from .output import Column, console, human_size, say, show, table
from .progress import progress

LS_COLUMNS = (Column("key"), Column("kind"), Column("bytes", size=True),
              Column("hits", numeric=True), Column("pin"), Column("voice", text=True),
              Column("text", text=True))


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add this module's commands."""
    p = subparsers.add_parser("ls", help="list stored entries, most recent first (keys as "
                              "short unique prefixes the other commands accept)")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print one JSON list (full keys too)")
    p.set_defaults(handler=ls)

    for name, pinned in (("pin", True), ("unpin", False)):
        p = subparsers.add_parser(name, help=f"{name} an entry by key (or unique key prefix)")
        p.add_argument("key", help="the full key or a unique prefix of at least 4 hex digits")
        if pinned:
            p.add_argument("--ttl", type=float, help="pinned for this many seconds only")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(handler=pin, pinned=pinned)

    p = subparsers.add_parser("gc", help="enforce caps and TTL; sweep temp files; check index")
    p.add_argument("--rebuild-index", action="store_true", help="rebuild the index from files")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=gc)


def ls(args: argparse.Namespace) -> int:
    """List entries from the index, each key as its shortest unique prefix."""
    cache = open_cache(settings_from(args), settled=True)
    try:
        index = cache.index
        rows = index.rows(limit=args.limit)
        shorts = {r.key: short_key(index, r.key) for r in rows}
    finally:
        cache.close()
    if args.json:
        print_json([{"key": r.key, "short": shorts[r.key], "kind": r.kind, "bytes": r.size,
                     "hits": r.hits, "pinned": r.pinned, "tenant": r.tenant, "voice": r.voice,
                     "model": r.model, "text": r.text, "created": r.created,
                     "expires": r.expires, "last_access": r.last_access} for r in rows])
        return 0
    if not rows:
        say("no entries")
        return 0
    # The key column is never cut: what it shows must paste back whole.
    table(LS_COLUMNS, ([shorts[r.key], r.kind, r.size, r.hits, "yes" if r.pinned else "",
                        r.voice, r.text] for r in rows))
    return 0


def pin(args: argparse.Namespace) -> int:
    """Pin or unpin one entry."""
    cache = open_cache(settings_from(args), settled=True)
    try:
        row = resolve_key(cache.index, args.key)
        until = time.time() + args.ttl if args.pinned and getattr(args, "ttl", None) else None
        if not cache.pin(row.key, args.pinned, until):
            raise NotFound(f"entry {row.key} was removed before it could be "
                           f"{'pinned' if args.pinned else 'unpinned'}")
        shown = short_key(cache.index, row.key)
    finally:
        cache.close()
    if args.json:
        print_json({"key": row.key, "short": shown, "pinned": args.pinned, "until": until})
        return 0
    verb = "pinned" if args.pinned else "unpinned"
    say(f"{verb} {shown}" + (f" until {_when(until)}" if until else "") + f"  {row.text!r}")
    return 0


def gc(args: argparse.Namespace) -> int:
    """Run maintenance now."""
    cache = open_cache(settings_from(args), settled=True)
    try:
        cache.folder.flush()
        index = cache.index
        with progress(as_json=args.json) as bars:  # a bar on a terminal only
            files = bars.task("rebuilding the index" if args.rebuild_index else
                              "checking unindexed files")
            checked = rebuild_index(cache.root, index, files.report) if args.rebuild_index \
                else reconcile(cache.root, index, files.report)
            evicting = bars.task("evicting (TTL, caps)")
            evicted = cache.gc()
            evicting.update(completed=1, total=1)
        total_bytes, entries = cache.index.totals()
        limits = cache.limits
    finally:
        cache.close()
    report = {"index": checked, "evicted": evicted, "bytes": total_bytes, "entries": entries}
    if args.json:
        print_json(report)
        return 0
    caps = [human_size(limits.max_bytes) if limits.max_bytes else "",
            f"{limits.max_entries:,} entries" if limits.max_entries else ""]
    checked_how = "rebuilt from the files" if args.rebuild_index else "checked against the files"
    lines = [
        f"index {checked_how}: " + _counts(checked, {
            "added": "rows added", "dropped": "rows dropped", "quarantined": "files quarantined",
            "temp_removed": "temp files removed", "locks_removed": "stale lock files removed"}),
        f"evicted {sum(evicted.values()):,}: " + _counts(evicted, {
            "expired": "expired", "size": "over the byte cap", "count": "over the entry cap"}),
        f"now stored: {entries:,} entries, {human_size(total_bytes)} (caps: "
        f"{', '.join(c for c in caps if c) or 'none'})",
    ]
    for line in lines:  # one fact per line, never wrapped: greppable in a cron mail
        say(f"[bold]gc[/] {line}")
    return 0


def _counts(counts: dict[str, int], labels: dict[str, str]) -> str:
    named = [f"{counts.get(name, 0):,} {label}" for name, label in labels.items()]
    named += [f"{value:,} {name.replace('_', ' ')}" for name, value in counts.items()
              if name not in labels]  # a count this command does not know yet still shows
    return ", ".join(named)


def explain_entry(args: argparse.Namespace) -> int:
    """What a stored entry's index row, envelope and usage record say (``explain --key``)."""
    settings = settings_from(args)
    cache = open_cache(settings, settled=True)
    try:
        row = resolve_key(cache.index, args.key)
        shown = short_key(cache.index, row.key)
        path = cache.folder.path_of(row.key, row.kind)
        try:  # a file, or an inline record for small entries
            stored: bytes | OSError | None = cache.folder.read_stored(row.key, row.kind)
        except (OSError, NotAnEntryFile) as exc:
            stored = OSError(str(exc))
    finally:
        cache.close()
    envelope, problem = _envelope(stored, row.key)
    info = {"key": row.key, "short": shown, "kind": row.kind, "path": str(path),
            "verified": problem is None, "problem": problem, "envelope": envelope,
            "index": _index_fields(row), "request": _asked(settings.cache_dir, row.key)}
    if args.json:
        print_json(info)
    else:
        _print_entry(info)
    return 0


def _envelope(blob: bytes | OSError | None, key: str
              ) -> tuple[dict[str, Any] | None, str | None]:
    """The verified envelope header, or (None, why not). Read-only: nothing is quarantined
    here (the next read through the cache does that)."""
    if blob is None:
        return None, "cannot read the file: nothing is stored under this key"
    if isinstance(blob, OSError):
        return None, f"cannot read the file: {blob.strerror or blob}"
    try:
        return dataclasses.asdict(decode(blob, key).header), None
    except CorruptEntry as exc:
        return None, f"does not verify: {exc}"


def _index_fields(row: IndexRow) -> dict[str, Any]:
    fields = dataclasses.asdict(row)
    fields.pop("key")
    return fields


def _asked(root: Path, key: str) -> dict[str, Any] | None:
    """The usage record of ``key``: how often it was asked, and the payload that was hashed."""
    with read_only_db(root / USAGE_DB) as db:
        if db is None:
            return None
        found = db.execute("SELECT kind, asked, missed, payload FROM usage WHERE key = ?",
                           (key,)).fetchone()
    if found is None:
        return None
    kind, asked, missed, payload = found
    return {"kind": kind, "asked": asked, "missed": missed, "payload": json.loads(payload)}


def _print_entry(info: dict[str, Any]) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    index = info["index"]
    grid.add_row("key", f"{info['key']}  (short: {info['short']})")
    grid.add_row("kind", f"{info['kind']}  {info['path']}")
    grid.add_row("verified", "yes: envelope and checksum match" if info["verified"]
                 else f"[red]NO[/]: {info['problem']}")
    h = info["envelope"]
    if h is not None:
        grid.add_row("created", _when(h["created"]) + "   expires: " + (
            _when(h["expires"]) if h["expires"] else "never"))
        if h["sample_rate"]:
            grid.add_row("audio", f"{h['sample_rate']} Hz, {h['channels']} channel(s), "
                         f"{h['sample_format']}, {h['duration']:.2f} s")
        grid.add_row("envelope", json.dumps(h["meta"], ensure_ascii=False))
    grid.add_row("index", f"{human_size(index['size'])}, {index['hits']} hit(s), last used "
                 f"{_when(index['last_access'])}, pinned: " + (
                     ("until " + _when(index["pin_until"])) if index["pinned"] and
                     index["pin_until"] else ("yes" if index["pinned"] else "no")))
    grid.add_row("stored by", f"tenant {index['tenant'] or 'default'}, engine {index['engine']}, "
                 f"model {index['model']}, voice {index['voice'] or '-'}")
    grid.add_row("text", Text(repr(index["text"])))
    request = info["request"]
    if request is None:
        grid.add_row("hashed", "not in the usage table (it keeps the most asked keys)")
    else:
        grid.add_row("asked", f"{request['asked']} time(s), {request['missed']} miss(es), "
                     f"as a {request['kind']}")
    show(grid)
    if request is not None:
        say("the payload that was hashed into this key:")
        console.print_json(data=request["payload"])


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
