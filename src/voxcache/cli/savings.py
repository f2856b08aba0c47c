"""``voxcache stats --savings``: what the cache saved, per tenant and voice (the ledger).

Reads the ledger of the cache folder (``policies.savings``) — with a Redis tier, every
node's mirrored rows too — and values it at the ``[savings]`` prices. ``--since`` takes
a duration back from now (``7d``, ``12h``) or a date (``2026-11-01``, UTC);
``--csv`` prints the rows as CSV, ``--json`` as JSON: the export.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from typing import Any

from ..policies import savings
from ..runtime import configured_gate, open_cache
from .common import print_json, settings_from
from .output import Column, say, table

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since(text: str) -> float:
    """``7d``, ``12h``, ``90m`` back from now, or a UTC date ``2026-11-01`` → a timestamp."""
    match = _DURATION.fullmatch(text)
    if match:
        return time.time() - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        day = datetime.date.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a duration (7d, 12h) nor a "
                                         "date (2026-11-01)") from None
    return datetime.datetime(day.year, day.month, day.day,
                             tzinfo=datetime.UTC).timestamp()


def report(args: argparse.Namespace) -> int:
    """Print the ledger's totals per tenant and voice (table, CSV or JSON)."""
    settings = settings_from(args)
    prices = configured_gate(settings).savings
    cache = open_cache(settings)
    try:
        fleet = cache.nodes.redis_access() is not None
        found = savings.totals(savings.rows(cache, args.since, fleet=fleet), prices)
    finally:
        cache.close()
    summary: dict[str, Any] = {
        "since": args.since, "fleet": fleet, "currency": prices.currency,
        "price_per_million_chars": prices.price_per_million_chars,
        "price_per_engine_second": prices.price_per_engine_second,
        "total": {name: round(sum(row[name] for row in found), 6)
                  for name in ("hits", "chars", "seconds", "money")},
        "rows": found}
    if args.csv:
        sys.stdout.write(savings.as_csv(found))
        return 0
    if args.json:
        print_json(summary)
        return 0
    where = "every node (Redis)" if fleet else "this cache folder"
    when = "" if args.since is None else " since " + datetime.datetime.fromtimestamp(
        args.since, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table((Column("tenant"), Column("voice"), Column("hits", numeric=True),
           Column("characters", numeric=True), Column("engine s", numeric=True),
           Column(f"saved {prices.currency}", numeric=True)),
          ((r["tenant"], r["voice"], r["hits"], r["chars"], f"{r['seconds']:.3f}",
            f"{r['money']:.4f}") for r in found),
          title=f"savings of {where}{when}")
    total = summary["total"]
    say(f"total: {total['hits']} hits, {total['chars']} characters, {total['seconds']:.3f} "
        f"engine seconds, {total['money']:.4f} {prices.currency}")
    return 0
