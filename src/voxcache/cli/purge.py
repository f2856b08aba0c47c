"""``voxcache purge``: delete stored entries by key, voice, tenant, age, or all of them.

``--voice`` resolves a name as the service does (``[voice_aliases]``, the engine's names
and aliases, OpenAI's names) before matching the index's canonical voice; an uploaded
voice id (``vc_…``) takes everything derived from its clip in its tenant, sessions
included. ``--dry-run`` lists what would go. Deletes go through ``Cache.delete``, the one
path that reaches every tier and every process.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..cache import Cache
from ..config import Settings
from ..engine import Engine
from ..errors import InvalidParameter, MissingDependency, NotFound, VoxcacheError
from ..runtime import open_cache
from ..stages import voice_anchor
from ..tiers.index import Index, IndexRow
from .common import FAILED, OK, USAGE, print_json, settings_from, warn
from .keys import resolve_key, short_key
from .output import Column, human_size, is_terminal, say, table

ROWS_SHOWN = 20
"""Entries listed one by one on a terminal; the rest are counted (a pipe gets every row)."""
COLUMNS = (Column("key"), Column("kind"), Column("bytes", size=True), Column("pin"),
           Column("voice", text=True), Column("text", text=True))


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``purge`` command."""
    p = subparsers.add_parser("purge", help="delete entries by key, voice, tenant, age, or all "
                              "(conditions combine: all must hold)")
    p.add_argument("--key", action="append", default=[], help="a full key or unique prefix "
                   "(repeatable)")
    p.add_argument("--voice", help="a voice as clients name it: an engine voice, one of its "
                   "aliases, a [voice_aliases] name, an OpenAI voice name, or an uploaded "
                   "voice id (vc_…: everything derived from its clip, in every tenant that "
                   "uploaded it unless --tenant says which)")
    p.add_argument("--tenant")
    p.add_argument("--older-than", type=float, metavar="SECONDS")
    p.add_argument("--all", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; "
                   "delete nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=purge)


def purge(args: argparse.Namespace) -> int:
    """Delete the selected entries from every tier (or, with --dry-run, list them)."""
    if not (args.key or args.voice or args.tenant or args.older_than is not None or args.all):
        warn("say what to purge: --key, --voice, --tenant, --older-than or --all")
        return USAGE
    settings = settings_from(args)
    uploaded = uploaded_voices(args.voice, args.tenant, settings) \
        if args.voice and args.voice.startswith("vc_") else None
    voice = uploaded_voice_report(args.voice, uploaded) if uploaded is not None else \
        resolve_voice(args.voice, settings) if args.voice else None
    cache = open_cache(settings, settled=True)
    try:
        index = cache.index
        keys = [resolve_key(index, given).key for given in args.key]
        where, params = _filter(args, keys, voice["canonical"] if voice else None, uploaded)
        rows = index.rows(where, params, order="key")
        shorts = {r.key: short_key(index, r.key) for r in rows[:ROWS_SHOWN]}
        voices_stored = _voices(index) if voice and not rows and uploaded is None else None
        deleted = 0
        if not args.dry_run:
            selected = {r.key for r in rows}
            # derived entries first: a take's delete takes its encodings along, and they
            # would then not count as deleted
            for row in sorted(rows, key=lambda r: r.parent not in selected):
                deleted += bool(cache.delete(row.key, row.kind))
            if uploaded and not (keys or args.older_than is not None):
                forget_anchors(cache, uploaded, {r.key for r in rows}, settings)
    finally:
        cache.close()
    report = {"dry_run": args.dry_run, "voice": voice, "matched": len(rows),
              "bytes": sum(r.size for r in rows), "deleted": deleted,
              "by_kind": dict(sorted(Counter(r.kind for r in rows).items())),
              "entries": [_entry(r, shorts.get(r.key)) for r in rows]}
    if args.json:
        print_json(report)
    else:
        _print(report, rows, shorts, voices_stored)
    named = bool(args.key or args.voice or args.tenant)
    return FAILED if named and not rows else OK


def uploaded_voices(voice_id: str, tenant: str | None, settings: Settings) -> list[Any]:
    """The uploaded voices with this id (one per tenant that uploaded the clip, or the one
    of ``tenant``); ``NotFound`` when there is none."""
    try:
        from ..service.voices import VOICE_ID, VoiceStore
    except ImportError as exc:
        raise MissingDependency(f"purging an uploaded voice reads the service's voice records; "
                                f"{exc.name or exc} is not importable: pip install "
                                "'voxcache[service]'") from None
    if not VOICE_ID.fullmatch(voice_id):
        raise InvalidParameter(f"{voice_id!r} is not an uploaded voice id (vc_ and 24 hex "
                               "digits, as POST /v1/voices answered)")
    found = [v for v in VoiceStore(settings.cache_dir / "voices", 0).find(voice_id)
             if tenant is None or v.tenant == tenant]
    if not found:
        where = f" of tenant {tenant!r}" if tenant else ""
        raise NotFound(f"no uploaded voice {voice_id!r}{where} in {settings.cache_dir}")
    return found


def uploaded_voice_report(voice_id: str, voices: list[Any]) -> dict[str, Any]:
    """What ``--voice vc_…`` resolved to (the report's ``voice``)."""
    tenants = ", ".join(sorted(v.tenant for v in voices))
    return {"asked": voice_id, "canonical": voices[0].fingerprint[:16],
            "how": f"an uploaded voice (tenant {tenants}): everything derived from its clip",
            "uploaded": [{"tenant": v.tenant, "fingerprint": v.fingerprint} for v in voices]}


def forget_anchors(cache: Cache, voices: list[Any], deleted: set[str],
                   settings: Settings) -> None:
    """Delete each voice's anchor: every process sharing the folder drops what it holds in
    memory from the clip (sessions, which no index lists); then stop recording the purged
    embedding's key in the voice (the service derives it again when asked)."""
    from ..service.voices import VoiceStore
    from ..stages import StageCache

    stages = StageCache(cache)
    store = VoiceStore(settings.cache_dir / "voices", 0)
    for voice in voices:
        stages.purge_voice(voice.tenant, voice.fingerprint)
        if voice.embedding in deleted:
            store.set_embedding(voice.tenant, voice.id, None)


def resolve_voice(name: str, settings: Settings) -> dict[str, str]:
    """The canonical voice the index records for ``name``, and how it was found."""
    aliases = {str(k): str(v) for k, v in settings.extra.get("voice_aliases", {}).items()}
    try:
        from ..runtime import load_configured_engine

        engine: Engine | None = load_configured_engine(settings)
    except VoxcacheError as exc:
        warn(f"cannot load the engine to resolve its voice names ({exc}); matching "
             f"{name!r} through [voice_aliases] only")
        engine = None
    canonical, how = canonical_voice(name, aliases, engine)
    return {"asked": name, "canonical": canonical, "how": how}


def canonical_voice(name: str, aliases: Mapping[str, str],
                    engine: Engine | None) -> tuple[str, str]:
    """(canonical voice, how it was resolved), in the order the service resolves names."""
    voices: Mapping[str, str] = engine.voices if engine is not None else {}
    if name in aliases:
        target = aliases[name]
        canonical = voices.get(target, target)
        via = f" (the engine's name for {canonical})" if canonical != target else ""
        return canonical, f"[voice_aliases] {name} = {target}{via}"
    if name in voices:
        canonical = voices[name]
        return canonical, ("an engine voice" if canonical == name
                           else f"the engine's alias of {canonical}")
    if engine is not None and engine.default_voice and name in _openai_voices():
        return engine.default_voice, "an OpenAI voice name: the engine's default voice"
    return name, "as given (not a voice or alias this engine knows)"


def _openai_voices() -> tuple[str, ...]:
    try:
        from ..service.options import OPENAI_VOICES
    except ImportError:  # the service extra is not installed: no OpenAI names to map
        return ()
    return OPENAI_VOICES


def _filter(args: argparse.Namespace, keys: list[str], voice: str | None,
            uploaded: list[Any] | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if keys:
        clauses.append(f"key IN ({','.join('?' * len(keys))})")
        params += keys
    if uploaded is not None:  # the clip's takes (and encodings) in its tenant, and its stages
        clauses.append("(" + " OR ".join(["((tenant = ? AND voice = ?) OR parent = ?)"]
                                         * len(uploaded)) + ")")
        for v in uploaded:
            params += [v.tenant, v.fingerprint[:16], voice_anchor(v.tenant, v.fingerprint)]
    elif voice is not None:
        clauses.append("voice = ?")
        params.append(voice)
    if args.tenant:
        clauses.append("tenant = ?")
        params.append(args.tenant)
    if args.older_than is not None:
        clauses.append("created < ?")
        params.append(time.time() - args.older_than)
    return " AND ".join(clauses) or "1", params


def _voices(index: Index) -> dict[str, int]:
    return dict(index.query("SELECT voice, count(*) FROM entries GROUP BY voice ORDER BY 2 DESC"))


def _entry(row: IndexRow, short: str | None) -> dict[str, Any]:
    return {"key": row.key, "short": short, "kind": row.kind, "bytes": row.size,
            "tenant": row.tenant, "voice": row.voice, "pinned": row.pinned, "text": row.text}


def _print(report: dict[str, Any], rows: list[IndexRow], shorts: dict[str, str],
           voices_stored: dict[str, int] | None) -> None:
    voice = report["voice"]
    if voice is not None:
        say(f"voice {voice['asked']!r} → {voice['canonical']!r}: {voice['how']}")
    if rows:
        shown = rows[:ROWS_SHOWN] if is_terminal() else rows
        table(COLUMNS, ([shorts[row.key], row.kind, row.size, "yes" if row.pinned else "",
                         row.voice, row.text] for row in shown),
              title="would be purged" if report["dry_run"] else "purged")
        if len(rows) > len(shown):
            say(f"… and {len(rows) - len(shown)} more")
    if report["by_kind"]:
        say("by kind: " + ", ".join(f"{kind} {n}" for kind, n in report["by_kind"].items()))
    size = human_size(report["bytes"])
    if report["dry_run"]:
        say(f"dry run: {report['matched']} entries ({size}) would be purged; nothing was "
            "deleted")
    else:
        say(f"purged {report['deleted']} entries ({size})")
        if voice is not None and "uploaded" in voice:
            say("sessions derived from the clip (memory only) are dropped by every running "
                "process sharing this cache folder")
    if voices_stored is not None:
        stored = ", ".join(f"{v or '(none)'} ({n})" for v, n in voices_stored.items())
        say(f"no entry has voice {voice['canonical']!r}; voices stored: {stored or 'none'}")
