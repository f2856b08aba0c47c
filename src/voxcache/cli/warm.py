"""``voxcache warm FILE``: pre-render the phrases a deployment repeats all day.

On the cache folder directly (a running server sees the takes at once), or with
``--server URL`` through a running service at background priority. Stored phrases are
skipped; each failure is reported with its reason. A line in a language the engine does
not speak is skipped and named in one warning; only a phrase the engine could render and
did not makes the exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidParameter, VoxcacheError
from ..request import SynthesisRequest
from .common import FAILED, OK, print_json, settings_from, warn
from .progress import progress

FIELDS = {"text", "voice", "language", "instruct", "seed", "speed", "params", "ttl", "pin",
          "prompt_text"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``warm`` command."""
    p = subparsers.add_parser("warm", help="pre-render a list of phrases (JSON or YAML)")
    p.add_argument("file", nargs="?", help='phrases: a list, or {"phrases": [...]}; each with '
                   "text and optionally voice, language, params, speed, seed, instruct, pin, ttl")
    p.add_argument("--from-top-misses", type=int, metavar="N", help="instead of a file: the N "
                   "most-missed requests and sentences recorded in this cache's usage table")
    p.add_argument("--pin", action="store_true", help="pin every phrase (never evicted)")
    p.add_argument("--server", metavar="URL", help="warm a running voxcache service (renders at "
                   "background priority) instead of the cache folder")
    p.add_argument("--api-key", help="API key for --server, when the service requires one")
    p.add_argument("--json", action="store_true", help="print one JSON summary")
    p.set_defaults(handler=warm)


def load_phrases(path: str | Path) -> list[dict[str, Any]]:
    """Read a phrase list; unknown fields are refused (a typo must not warm the wrong take)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        if str(path).endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:
        raise InvalidParameter(f"{path}: cannot parse phrases ({exc})") from None
    phrases = data.get("phrases") if isinstance(data, dict) else data
    if not isinstance(phrases, list):
        raise InvalidParameter(f"{path}: expected a list of phrases or {{\"phrases\": [...]}}")
    out = []
    for i, item in enumerate(phrases):
        item = {"text": item} if isinstance(item, str) else item
        if not isinstance(item, dict) or "text" not in item:
            raise InvalidParameter(f"{path}: phrase {i} needs a text")
        unknown = set(item) - FIELDS
        if unknown:
            raise InvalidParameter(f"{path}: phrase {i} has unknown field(s) "
                                   f"{', '.join(sorted(unknown))}")
        out.append(item)
    return out


def speaks(languages: Sequence[str], language: str | None) -> bool:
    """True when an engine speaking ``languages`` accepts ``language`` (None: its default).

    The request resolver's rule, applied before a render (and to a remote service's
    ``/v1/engine`` list): exact after case and ``_``/``-`` folding, or a bare primary
    language when the engine has exactly one variant of it ("en" → "en-us").
    """
    if not language:
        return True
    wanted = language.strip().lower().replace("_", "-")
    same_primary = [lang for lang in languages if lang.split("-")[0] == wanted]
    return wanted in languages or len(same_primary) == 1


def warm(args: argparse.Namespace) -> int:
    """Render what is missing, pin what is asked; exit 1 if a phrase the engine speaks failed."""
    from ..runtime import open_cached_engine

    if args.from_top_misses:
        from ..policies.usage import top_phrases

        phrases = top_phrases(settings_from(args).cache_dir, args.from_top_misses)
    elif args.file:
        phrases = load_phrases(args.file)
    else:
        raise InvalidParameter("name a phrases FILE or use --from-top-misses N")
    summary: dict[str, Any] = {"rendered": 0, "cached": 0, "pinned": 0, "failed": [],
                               "skipped": 0, "skipped_languages": {}}
    if args.server:
        from .warm_remote import RemoteWarmer

        warmer: Any = RemoteWarmer(args.server, args.api_key)
        languages = warmer.languages()
    else:
        # A batch job beside a live server: lowest CPU priority, set before the engine
        # starts its threads so they inherit it.
        os.nice(19 - os.nice(0))
        warmer = open_cached_engine(settings_from(args))
        languages = warmer.engine.languages
    unspoken: Counter[str] = Counter()
    try:
        with progress(as_json=args.json) as bars:  # a bar on a terminal only
            task = bars.task("warming", total=len(phrases))
            for phrase in phrases:
                if languages is not None and not speaks(languages, phrase.get("language")):
                    unspoken[str(phrase["language"])] += 1
                elif args.server:
                    warmer.warm(phrase, args.pin, summary)
                else:
                    _warm_one(warmer, phrase, args.pin, summary)
                task.advance()
    finally:
        warmer.close() if args.server else warmer.cache.close()
    summary["skipped"], summary["skipped_languages"] = unspoken.total(), dict(unspoken)
    if unspoken:
        named = ", ".join(f"{lang} ({n})" for lang, n in unspoken.most_common())
        warn(f"skipped {unspoken.total()} phrase(s) in languages the engine does not speak: "
             f"{named}; it speaks {', '.join(languages or ())}")
    if args.json:
        print_json(summary)
    else:
        print(f"rendered {summary['rendered']}, already cached {summary['cached']}, pinned "
              f"{summary['pinned']}, skipped {summary['skipped']} (language), failed "
              f"{len(summary['failed'])}")
        for failure in summary["failed"]:
            print(f"  failed: {failure['text']!r}: {failure['error']}")
    return FAILED if summary["failed"] else OK


def _warm_one(cached: Any, phrase: dict[str, Any], pin_all: bool,
              summary: dict[str, Any]) -> None:
    fields = {k: v for k, v in phrase.items() if k != "pin" and v is not None}
    try:
        request = SynthesisRequest(**fields)
        _, key = cached.resolve_and_key(request)
        if cached.cache.get(key) is not None:
            summary["cached"] += 1
        else:
            cached.synthesize(request)
            summary["rendered"] += 1
        if (pin_all or phrase.get("pin")) and cached.cache.pin(key):
            summary["pinned"] += 1
    except (VoxcacheError, TypeError) as exc:
        summary["failed"].append({"text": str(phrase.get("text"))[:80], "error": str(exc)})
