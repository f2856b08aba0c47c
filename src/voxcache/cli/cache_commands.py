"""Commands over the cache: synth, explain, stats, ls, pin, unpin, purge, gc."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..runtime import open_cache, open_cached_engine
from ..tiers.lifecycle import rebuild_index, reconcile
from .common import add_request_options, print_json, request_from, settings_from

console = Console()


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add this module's commands."""
    p = subparsers.add_parser("synth", help="render text (from the cache when possible)")
    add_request_options(p)
    p.add_argument("-o", "--output", help="write the WAV here")
    p.add_argument("--pin", action="store_true", help="never evict this take")
    p.set_defaults(handler=synth)

    p = subparsers.add_parser("explain", help="show the canonical key payload of a request")
    add_request_options(p)
    p.set_defaults(handler=explain)

    p = subparsers.add_parser("stats", help="entries, bytes and counters")
    p.add_argument("--json", action="store_true")
    p.add_argument("--top-misses", type=int, metavar="N", help="the N most-missed requests "
                   "and sentences, with voice/instruct/text")
    p.add_argument("--top-hits", type=int, metavar="N", help="the N most-hit ones")
    p.add_argument("--kind", choices=("request", "segment"), help="only whole requests or "
                   "only sentences (with --top-misses/--top-hits)")
    p.set_defaults(handler=stats)

    p = subparsers.add_parser("ls", help="list stored entries, most recent first")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=ls)

    for name, pinned in (("pin", True), ("unpin", False)):
        p = subparsers.add_parser(name, help=f"{name} an entry by key")
        p.add_argument("key")
        if pinned:
            p.add_argument("--ttl", type=float, help="pinned for this many seconds only")
        p.set_defaults(handler=pin, pinned=pinned)

    p = subparsers.add_parser("purge", help="delete entries by key, voice, age, or all")
    p.add_argument("--key", action="append", default=[])
    p.add_argument("--voice")
    p.add_argument("--tenant")
    p.add_argument("--older-than", type=float, metavar="SECONDS")
    p.add_argument("--all", action="store_true")
    p.set_defaults(handler=purge)

    p = subparsers.add_parser("gc", help="enforce caps and TTL; sweep temp files; check index")
    p.add_argument("--rebuild-index", action="store_true", help="rebuild the index from files")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=gc)


def synth(args: argparse.Namespace) -> int:
    """Render (or fetch) one request."""
    cached = open_cached_engine(settings_from(args))
    try:
        result = cached.synthesize(request_from(args))
        if args.pin:
            cached.cache.pin(result.key)
        if args.output:
            Path(args.output).write_bytes(result.wav)
        header = result.entry.header
        summary = {"key": result.key, "cache": result.cache, "tier": result.tier,
                   "seconds": round(result.seconds, 6), "bytes": len(result.wav),
                   "sample_rate": header.sample_rate, "duration": header.duration,
                   "stored": result.stored, "output": args.output,
                   "segments": {"hit": result.segments_hit, "rendered": result.segments_rendered},
                   "take": result.take}
    finally:
        cached.cache.close()
    if args.json:
        print_json(summary)
        return 0
    if result.segments_hit or result.segments_rendered:
        console.print(f"sentences: {result.segments_hit} from the cache, "
                      f"{result.segments_rendered} rendered")
    console.print(f"[bold]{result.cache.upper()}[/] from {result.tier} in "
                  f"{result.seconds * 1000:.2f} ms — {header.duration:.2f} s of audio, "
                  f"key {result.key[:16]}…" + (f" → {args.output}" if args.output else ""))
    if not result.stored:
        console.print("[yellow]served without caching: the take could not be stored[/]")
    return 0


def explain(args: argparse.Namespace) -> int:
    """Print the canonical payload and key without rendering."""
    cached = open_cached_engine(settings_from(args))
    try:
        info = cached.explain(request_from(args))
        info["cached"] = cached.cache.get(info["key"]) is not None
    finally:
        cached.cache.close()
    if args.json:
        print_json(info)
    else:
        console.print_json(data=info["payload"])
        console.print(f"key: {info['key']}  (cached: {info['cached']})")
    return 0


def stats(args: argparse.Namespace) -> int:
    """Print tier sizes and persisted counters."""
    if args.top_misses or args.top_hits:
        return top_usage(args)
    cache = open_cache(settings_from(args))
    try:
        data = cache.stats()
    finally:
        cache.close()
    if args.json:
        print_json(data)
        return 0
    disk = data["tiers"]["disk"]
    console.print(f"cache {data['root']}: {disk['entries']} entries, {disk['bytes']:,} bytes "
                  f"(cap {disk['max_bytes'] or 'none'})")
    table = Table("counter", "value")
    for name, value in sorted(data["counters"].items()):
        table.add_row(name, f"{value:,}")
    console.print(table)
    return 0


def top_usage(args: argparse.Namespace) -> int:
    """Print the most-missed or most-hit requests and sentences (voxcache.usage)."""
    from ..usage import Usage

    by, limit = ("missed", args.top_misses) if args.top_misses else ("hits", args.top_hits)
    rows = Usage(settings_from(args).cache_dir, frozenset()).top(by, limit, args.kind)
    out = [{"kind": r["kind"], "asked": r["asked"], "missed": r["missed"],
            "hits": r["asked"] - r["missed"], "voice": r["voice"], "instruct": r["instruct"],
            "text": r["text"], "model": r["model"], "key": r["key"]} for r in rows]
    if args.json:
        print_json(out)
        return 0
    table = Table("kind", "asked", "missed", "hits", "voice", "instruct", "text",
                  title=f"top {'misses' if by == 'missed' else 'hits'}")
    for r in out:
        table.add_row(r["kind"], str(r["asked"]), str(r["missed"]), str(r["hits"]),
                      r["voice"] or "", r["instruct"] or "", r["text"][:60])
    console.print(table)
    return 0


def ls(args: argparse.Namespace) -> int:
    """List entries from the index."""
    cache = open_cache(settings_from(args))
    try:
        rows = cache.disk.index.rows(limit=args.limit)
    finally:
        cache.close()
    if args.json:
        print_json([{"key": r.key, "kind": r.kind, "bytes": r.size, "hits": r.hits,
                     "pinned": r.pinned, "voice": r.voice, "text": r.text,
                     "created": r.created, "last_access": r.last_access} for r in rows])
        return 0
    table = Table("key", "kind", "bytes", "hits", "pin", "voice", "text")
    for r in rows:
        table.add_row(r.key[:16], r.kind, f"{r.size:,}", str(r.hits), "yes" if r.pinned else "",
                      r.voice, r.text[:60])
    console.print(table)
    return 0


def pin(args: argparse.Namespace) -> int:
    """Pin or unpin one entry."""
    cache = open_cache(settings_from(args))
    try:
        until = time.time() + args.ttl if args.pinned and args.ttl else None
        found = cache.pin(args.key, args.pinned, until)
    finally:
        cache.close()
    if not found:
        console.print(f"no entry with key {args.key}")
        return 1
    console.print(f"{'pinned' if args.pinned else 'unpinned'} {args.key}")
    return 0


def purge(args: argparse.Namespace) -> int:
    """Delete the selected entries from every tier."""
    where, params = _purge_filter(args)
    if where is None:
        console.print("say what to purge: --key, --voice, --tenant, --older-than or --all")
        return 2
    cache = open_cache(settings_from(args))
    try:
        rows = cache.disk.index.rows(where, params)
        for row in rows:
            cache.delete(row.key, row.kind)
    finally:
        cache.close()
    console.print(f"purged {len(rows)} entries")
    return 0


def _purge_filter(args: argparse.Namespace) -> tuple[str | None, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if args.key:
        clauses.append(f"key IN ({','.join('?' * len(args.key))})")
        params += args.key
    if args.voice:
        clauses.append("voice = ?")
        params.append(args.voice)
    if args.tenant:
        clauses.append("tenant = ?")
        params.append(args.tenant)
    if args.older_than is not None:
        clauses.append("created < ?")
        params.append(time.time() - args.older_than)
    if args.all:
        clauses.append("1")
    return (" AND ".join(clauses) if clauses else None), params


def gc(args: argparse.Namespace) -> int:
    """Run maintenance now."""
    cache = open_cache(settings_from(args))
    try:
        cache.disk.flush()
        index = cache.disk.index
        checked = rebuild_index(cache.root, index) if args.rebuild_index else reconcile(
            cache.root, index)
        evicted = cache.gc()
        totals = cache.disk.index.totals()
    finally:
        cache.close()
    report = {"index": checked, "evicted": evicted, "bytes": totals[0], "entries": totals[1]}
    if args.json:
        print_json(report)
    else:
        console.print(report)
    return 0
