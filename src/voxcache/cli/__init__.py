"""The ``voxcache`` command line: thin commands over the library.

Each command module exposes ``register(subparsers)``; a command's handler takes
the parsed arguments and returns an exit code. Deliberate errors print one line
that says what to fix and exit with the code their kind calls for (see
``common.EXIT_CODES_HELP``, printed by ``voxcache --help``) — never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import load_settings
from ..errors import VoxcacheError
from ..logs import LOG_FORMATS, configure
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
    parser.add_argument("--version", action="version", version=f"voxcache {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log voxcache's own debug lines (libraries stay at warnings)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="log lines as text (the "
                        "default) or one JSON object per line ($VOXCACHE_LOG_FORMAT, "
                        "log_format in the config)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    configure(_log_format(args), verbose=args.verbose)
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # here, so a closed pipe is caught below, not at exit
        return code
    except VoxcacheError as exc:
        code = exit_code_for(exc)
        print(f"voxcache: error: {exc}", file=sys.stderr)
        if getattr(args, "json", False):
            print_json({"error": {"message": str(exc), "exit_code": code}})
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _log_format(args: argparse.Namespace) -> str:
    """``--log-format``, else the settings' (environment, config file); a config that does
    not load is the command's to report, in the default format."""
    if args.log_format:
        return str(args.log_format)
    try:
        return load_settings(args.config).log_format
    except VoxcacheError:
        return "text"


def _reader_gone() -> int:
    """stdout's reader left (``voxcache ls | head``): stop quietly, as ``cat`` does.

    stdout is pointed at /dev/null first, so the interpreter's last flush at exit has
    nowhere to fail either; the exit code is the shell's for a SIGPIPE death (128 + 13)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


if __name__ == "__main__":
    sys.exit(main())
