"""Commands about requests: synth, explain, stats (entries by key: ``entries``, ``purge``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InvalidParameter
from ..policies.admit import recent_refusals, refusal_counts
from ..runtime import open_cache, open_cached_engine
from ..stages.figures import is_stage_counter, stage_figures
from ..vocabulary import TierName
from .common import (
    USAGE,
    add_request_options,
    print_json,
    request_from,
    request_options_given,
    settings_from,
    warn,
)
from .keys import short_key
from .output import Column, console, human_size, say, table
from .rerender import model_revisions
from .savings import report as savings_report
from .savings import since as savings_since


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add this module's commands."""
    p = subparsers.add_parser("synth", help="render text (from the cache when possible)")
    add_request_options(p)
    p.add_argument("-o", "--output", help="write the WAV here")
    p.add_argument("--pin", action="store_true", help="never evict this take")
    p.set_defaults(handler=synth)

    p = subparsers.add_parser("explain", help="show the canonical key payload of a request, "
                              "or what a stored entry's envelope and index say (--key)")
    add_request_options(p, text_required=False)
    p.add_argument("--key", metavar="KEY", help="explain a stored entry instead: its full key "
                   "or a unique prefix (as `voxcache ls` prints)")
    p.set_defaults(handler=explain)

    p = subparsers.add_parser("stats", help="entries, bytes and counters")
    p.add_argument("--json", action="store_true")
    p.add_argument("--top-misses", type=int, metavar="N", help="the N most-missed requests "
                   "and sentences, with voice/instruct/text")
    p.add_argument("--top-hits", type=int, metavar="N", help="the N most-hit ones")
    p.add_argument("--kind", choices=("request", "segment"), help="only whole requests or "
                   "only sentences (with --top-misses/--top-hits)")
    p.add_argument("--savings", action="store_true", help="what the cache saved per tenant "
                   "and voice: hits, characters, engine seconds, money at the [savings] prices")
    p.add_argument("--since", type=savings_since, metavar="WHEN", help="with --savings: from "
                   "a duration ago (7d, 12h) or a date (2026-11-01, UTC)")
    p.add_argument("--csv", action="store_true", help="with --savings: print CSV")
    p.set_defaults(handler=stats)


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
                   "stored": result.stored, "reason": result.reason or None,
                   "output": args.output,
                   "segments": {"hit": result.segments_hit, "rendered": result.segments_rendered},
                   "take": result.take}
        shown = short_key(cached.cache.index, result.key) if result.stored else result.key
    finally:
        cached.cache.close()
    if args.json:
        print_json(summary)
        return 0
    if result.segments_hit or result.segments_rendered:
        say(f"sentences: {result.segments_hit} from the cache, "
            f"{result.segments_rendered} rendered")
    say(f"[bold]{result.cache.upper()}[/] from {result.tier} in "
        f"{result.seconds * 1000:.2f} ms — {header.duration:.2f} s of audio, "
        f"key {shown}" + (f" → {args.output}" if args.output else ""))
    if result.reason:
        say(f"[yellow]served without caching: the storing gate refused it ({result.reason}; "
            "docs/operating/admission.md)[/]")
    elif not result.stored:
        say("[yellow]served without caching: the take could not be stored[/]")
    return 0


def explain(args: argparse.Namespace) -> int:
    """Print the canonical payload and key without rendering (or a stored entry's record)."""
    if args.key is not None:
        given = request_options_given(args) + (["TEXT"] if args.text is not None else [])
        if given:
            raise InvalidParameter(f"--key explains a stored entry; {', '.join(given)} "
                                   "describe a request: give one or the other")
        from .entries import explain_entry

        return explain_entry(args)
    if args.text is None:
        raise InvalidParameter("give the TEXT of a request to explain, or --key KEY for a "
                               "stored entry")
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
        say(f"key: {info['key']}  (cached: {info['cached']})")
    return 0


def stats(args: argparse.Namespace) -> int:
    """Print tier sizes, persisted counters, the stage caches and the model revisions."""
    if args.savings:
        return savings_report(args)
    if args.since is not None or args.csv:
        warn("--since and --csv go with --savings")
        return USAGE
    if args.top_misses or args.top_hits:
        return top_usage(args)
    cache = open_cache(settings_from(args), settled=True)
    try:
        data = cache.stats()
        data["revisions"] = model_revisions(cache)
        data["refusals"] = refusal_counts(data["counters"])
        data["refused_recently"] = recent_refusals(cache)
    finally:
        cache.close()
    data["stages"] = stage_figures(data["counters"])
    if args.json:
        print_json(data)
        return 0
    disk = data["tiers"][TierName.DISK]
    count = disk["entries"]
    entries = ("entries unknown (the index cannot answer now)" if count is None else
               f"{count:,} entr{'y' if count == 1 else 'ies'}")
    say(f"cache {data['root']}: {entries}, {human_size(disk['bytes'])} "
        f"(cap {human_size(disk['max_bytes'])})")
    table((Column("counter"), Column("value", numeric=True)),
          ((name, value) for name, value in sorted(data["counters"].items())
           if not is_stage_counter(name)))  # those are in the table per kind below
    _print_revisions(data["revisions"])
    _print_stages(data["stages"])
    _print_refusals(data["refusals"], data["refused_recently"])
    return 0


def _print_refusals(counts: dict[str, int], recent: list[dict[str, object]]) -> None:
    """Takes served but not stored, by reason, and the latest quality refusals by key."""
    if not counts:
        say("storing gate: every take rendered here was stored")
        return
    table((Column("not stored because"), Column("takes", numeric=True)),
          sorted(counts.items()), title="storing gate (docs/operating/admission.md)")
    if recent:
        table((Column("key"), Column("reason"), Column("tenant"), Column("times", numeric=True)),
              ((r["key"], r["reason"], r["tenant"], r["times"]) for r in recent),
              title="latest quality refusals (voxcache explain is no use: they are not stored)")


def _print_revisions(revisions: dict[str, dict[str, int]]) -> None:
    """The model revisions this cache knows (what ``rerender --from-revision`` takes)."""
    if not revisions:
        say("model revisions: none yet (nothing was rendered here)")
        return
    table((Column("model revision"), Column("requests asked", numeric=True),
           Column("takes stored", numeric=True)),
          ((model, n["asked"], n["stored"]) for model, n in sorted(revisions.items())),
          title="model revisions (rerender --from-revision R re-renders one's most asked)")


def _print_stages(stages: dict[str, dict[str, float]]) -> None:
    """The stage caches per kind (embeddings, prompts, token takes, sessions), once any
    stage has been used in this cache folder."""
    if not any(any(figures.values()) for figures in stages.values()):
        say("stage caches: not used yet")
        return
    columns = [Column("kind"), *(Column(name, numeric=True) for name in (
        "hits", "misses", "joins", "hit rate")), Column("bytes", size=True),
        Column("saved s", numeric=True), Column("spent s", numeric=True)]
    rows = []
    for kind, f in stages.items():
        lookups = f["hits"] + f["misses"]
        rate = f"{f['hits'] / lookups:.1%}" if lookups else "-"
        rows.append((kind, int(f["hits"]), int(f["misses"]), int(f["joins"]), rate,
                     int(f["bytes"]), f"{f['saved_seconds']:.3f}",
                     f"{f['compute_seconds']:.3f}"))
    table(columns, rows, title="stage caches (bytes written; saved: extractor time the hits "
          "did not spend; spent: extractor time of the misses)")


def top_usage(args: argparse.Namespace) -> int:
    """Print the most-missed or most-hit requests and sentences (voxcache.usage)."""
    from ..policies.usage import Usage

    by, limit = ("missed", args.top_misses) if args.top_misses else ("hits", args.top_hits)
    rows = Usage(settings_from(args).cache_dir, frozenset()).top(by, limit, args.kind)
    out = [{"kind": r["kind"], "asked": r["asked"], "missed": r["missed"],
            "hits": r["asked"] - r["missed"], "voice": r["voice"], "instruct": r["instruct"],
            "text": r["text"], "model": r["model"], "key": r["key"]} for r in rows]
    if args.json:
        print_json(out)
        return 0
    table((Column("kind"), Column("asked", numeric=True), Column("missed", numeric=True),
           Column("hits", numeric=True), Column("voice"), Column("instruct", text=True),
           Column("text", text=True)),
          ((r["kind"], r["asked"], r["missed"], r["hits"], r["voice"], r["instruct"], r["text"])
           for r in out), title=f"top {'misses' if by == 'missed' else 'hits'}")
    return 0
