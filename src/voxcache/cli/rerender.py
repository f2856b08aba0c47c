"""``voxcache rerender --from-revision R``: warm a new model from the old one's most-used takes.

After a model upgrade every key changes, so the first listener of each phrase
would wait for a render. The usage table remembers which requests were asked
for under the old revision (with their full key payload); this command renders
the most-asked of them with the current engine ahead of traffic. It renders
strictly (never serving the old take) and skips what is already there, so it
can be stopped and run again. A revision this cache has never seen is an error
that lists the revisions it has (a typo must not look like "nothing to do").
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from ..cache import Cache
from ..errors import NotFound, VoxcacheError
from ..policies.upgrades import DB_NAME as ALIASES_DB
from ..policies.usage import DB_NAME as USAGE_DB
from ..policies.usage import Usage, request_from_payload
from .common import FAILED, OK, print_json, read_only_db, settings_from
from .progress import progress


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``rerender`` command."""
    p = subparsers.add_parser("rerender", help="re-render an older model revision's most-used "
                              "requests with the current model")
    p.add_argument("--from-revision", required=True, metavar="R",
                   help="the model revision whose takes to redo (see `voxcache stats`)")
    p.add_argument("--top", type=int, default=100, metavar="N", help="how many (most asked)")
    p.add_argument("--json", action="store_true", help="print one JSON summary")
    p.set_defaults(handler=rerender)


def candidates(usage: Usage, revision: str, top: int) -> list[dict[str, Any]]:
    """Keys asked under ``revision``, most asked first.

    Sentences count too: a context-free sentence's key is the key of that sentence
    asked alone, so re-rendering it warms every paragraph that contains it.
    """
    usage.flush()
    if not usage.path.exists():
        return []
    with usage._connect() as db:
        cursor = db.execute("SELECT key, text, payload, asked FROM usage WHERE model = ? AND "
                            "json_extract(payload, '$.kind') = 'audio' ORDER BY asked DESC "
                            "LIMIT ?", (revision, top))
        return [dict(zip(("key", "text", "payload", "asked"), row, strict=True))
                for row in cursor]


def rerender(args: argparse.Namespace) -> int:
    """Render the old revision's most-asked requests with the current engine."""
    from ..runtime import open_cached_engine

    cached = open_cached_engine(settings_from(args))
    cached.model_policy = "strict"  # warming must produce new takes, not serve old ones
    summary: dict[str, Any] = {"from_revision": args.from_revision,
                               "to_revision": cached.engine.model_revision,
                               "rendered": 0, "cached": 0, "skipped": 0, "failed": []}
    try:
        if args.from_revision == cached.engine.model_revision:
            summary["note"] = "that is the current revision: nothing to re-render"
            rows = []
        else:
            rows = candidates(cached.usage, args.from_revision, args.top)
            if not rows:
                _check_known(cached, args.from_revision)
                summary["note"] = "no request asked under that revision is recorded"
        with progress(as_json=args.json) as bars:  # a bar on a terminal only
            task = bars.task("re-rendering", total=len(rows))
            for row in rows:
                task.update(note=str(row["text"])[:40])
                _one(cached, row, summary)
                task.advance()
    finally:
        cached.usage.flush()
        cached.cache.close()
    if args.json:
        print_json(summary)
    else:
        print(f"{summary['from_revision']} → {summary['to_revision']}: rendered "
              f"{summary['rendered']}, already cached {summary['cached']}, skipped "
              f"{summary['skipped']} (cloned voices), failed {len(summary['failed'])}"
              + (f" — {summary['note']}" if "note" in summary else ""))
    return FAILED if summary["failed"] else OK


def model_revisions(cache: Cache) -> dict[str, dict[str, int]]:
    """Model revisions this cache folder knows: requests asked (usage table), takes stored
    (index) and lineages pointing at them (alias table). ``voxcache stats`` lists them."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: {"asked": 0, "stored": 0,
                                                            "latest": 0})
    with read_only_db(cache.root / USAGE_DB) as db:
        if db is not None:
            for model, n in db.execute("SELECT model, count(*) FROM usage WHERE json_extract("
                                       "payload, '$.kind') = 'audio' GROUP BY model"):
                found[model]["asked"] += n
    for model, n in cache.index.query(
            "SELECT model, count(*) FROM entries WHERE kind = 'audio' AND model != '' "
            "GROUP BY model"):
        found[model]["stored"] += n
    with read_only_db(cache.root / ALIASES_DB) as db:
        if db is not None:
            for model, n in db.execute("SELECT model, count(*) FROM aliases GROUP BY model"):
                found[model]["latest"] += n
    return dict(found)


def _check_known(cached: Any, revision: str) -> None:
    """Raise NotFound naming the revisions there are, unless ``revision`` is one of them."""
    cached.usage.flush()
    known = model_revisions(cached.cache)
    if revision in known:
        return
    current = cached.engine.model_revision
    listed = "; ".join(
        f"{model}{' (current)' if model == current else ''}: {n['asked']} request(s) asked, "
        f"{n['stored']} take(s) stored" for model, n in sorted(known.items()))
    raise NotFound(f"this cache has no takes or requests of model revision {revision!r}; "
                   f"revisions it knows: {listed or 'none (nothing was rendered here yet)'}")


def _one(cached: Any, row: dict[str, Any], summary: dict[str, Any]) -> None:
    request = request_from_payload(row)
    if request is None:
        summary["skipped"] += 1
        return
    try:
        _, key = cached.resolve_and_key(request)
        if cached.cache.get(key) is not None:
            summary["cached"] += 1
            return
        cached.synthesize(request)
        summary["rendered"] += 1
    except VoxcacheError as exc:
        summary["failed"].append({"text": str(row["text"])[:80], "error": str(exc)})
