"""``voxcache engines``: the engines this installation can render with.

Lists the built-in engines and every plugin of the ``voxcache.engines`` entry-point group:
its name, its ``module:Class`` and the distribution that registers it. ``--check``
imports each one and says why one cannot be loaded.
"""

from __future__ import annotations

import argparse

from ..engines import engine_class, installed
from ..errors import VoxcacheError
from .common import FAILED, OK, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("engines", help="list the engines installed (plugins included)",
                              description=__doc__)
    p.add_argument("--check", action="store_true", help="import each engine; exit 1 if one "
                   "cannot be loaded")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=engines)


def engines(args: argparse.Namespace) -> int:
    rows = []
    for engine in installed():
        row = {"name": engine.name, "class": engine.target, "distribution": engine.distribution}
        if args.check:
            try:
                engine_class(engine.name)
                row["loads"] = "yes"
            except VoxcacheError as exc:
                row["loads"] = f"no: {exc}"
        rows.append(row)
    if args.json:
        print_json({"engines": rows})
    else:
        for row in rows:
            loads = f"  [{row['loads']}]" if "loads" in row else ""
            print(f"{row['name']:<16} {row['class']:<44} {row['distribution']}{loads}")
    broken = any(str(row.get("loads", "yes")) != "yes" for row in rows)
    return FAILED if broken else OK
