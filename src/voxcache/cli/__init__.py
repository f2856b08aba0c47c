"""The ``voxcache`` command line: thin commands over the library.

Each command module exposes ``register(subparsers)``; a command's handler takes
the parsed arguments and returns an exit code. Deliberate errors print one line
that says what to fix and exit with the code their kind calls for (see
``common.EXIT_CODES_HELP``, printed by ``voxcache --help``) — never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ..errors import VoxcacheError
from . import bench, cache_commands, engines, entries, pack, purge, rerender, serve, warm
from .common import EXIT_CODES_HELP, exit_code_for, print_json

COMMAND_MODULES = [cache_commands, entries, purge, serve, warm, bench, rerender, pack,
                   engines]


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every command registered."""
    parser = argparse.ArgumentParser(prog="voxcache", description=__doc__.splitlines()[0],
                                     epilog=EXIT_CODES_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", help="cache folder (default: $VOXCACHE_DIR or "
                        "~/.cache/voxcache)")
    parser.add_argument("--config", help="TOML settings file (default: $VOXCACHE_CONFIG)")
    parser.add_argument("--engine", help="engine to render with: a name `voxcache engines` "
                        "lists, or package.module:Class")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.handler(args) or 0)
    except VoxcacheError as exc:
        code = exit_code_for(exc)
        print(f"voxcache: error: {exc}", file=sys.stderr)
        if getattr(args, "json", False):
            print_json({"error": {"message": str(exc), "exit_code": code}})
        return code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
