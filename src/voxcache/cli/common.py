"""Helpers shared by the command modules: settings, request options, output, exit codes."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from ..config import Settings, load_settings
from ..errors import EngineError, InvalidParameter, MissingDependency, NotFound, Overloaded
from ..request import SynthesisRequest

log = logging.getLogger("voxcache.cli")

OK, FAILED, USAGE = 0, 1, 2
"""Exit codes: done (nothing to do included); the command was right but did not happen (what
it names is not there, or a render failed); the command must change (usage, config, input)."""

EXIT_CODES_HELP = """exit codes (every command):
  0    done, "nothing to do" included (gc with nothing to evict, warm of phrases already
       stored or in a language the engine does not speak: those are skipped and counted)
  1    the command was right but did not happen: what it names is not there (a key or key
       prefix, a revision, a voice or tenant with no entries) or a render failed
  2    the command must change: a bad option or value, an ambiguous or too-short key
       prefix, an unreadable file or config, input the engine refuses
  130  interrupted

synth, explain, stats, ls, pin, unpin, purge, gc, warm, rerender and pack print for
people by default and one JSON document with --json, an error included once the options parse
({"error": {"message": ..., "exit_code": ...}} on stdout, the message on stderr)."""

progress_console = Console(stderr=True)
"""Progress bars go to stderr: stdout carries the result (one JSON document with --json)."""


def settings_from(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Settings with the global command-line options (and a command's own) applied."""
    settings = load_settings(args.config, cache_dir=args.cache_dir, engine=args.engine,
                             log_format=getattr(args, "log_format", None), **overrides)
    log.debug("settings: cache folder %s, config %s, engine %s, tiers %s", settings.cache_dir,
              args.config or os.environ.get("VOXCACHE_CONFIG") or "none", settings.engine,
              ", ".join(settings.tiers))
    return settings


def exit_code_for(exc: Exception) -> int:
    """The exit code for a deliberate error (see ``EXIT_CODES_HELP``)."""
    if isinstance(exc, NotFound | Overloaded):
        return FAILED
    if isinstance(exc, EngineError) and not isinstance(exc, MissingDependency):
        return FAILED
    return USAGE


REQUEST_OPTION_DEFAULTS: dict[str, Any] = {
    "voice": None, "reference": None, "prompt_text": None, "seed": None, "speed": 1.0,
    "instruct": None, "language": None, "param": [], "ttl": None, "seed_policy": None}


def add_request_options(parser: argparse.ArgumentParser, text_required: bool = True) -> None:
    """Options that describe a synthesis request (synth, explain)."""
    if text_required:
        parser.add_argument("text", help="text to speak")
    else:
        parser.add_argument("text", nargs="?", help="text to speak")
    parser.add_argument("--voice", help="voice name")
    parser.add_argument("--reference", help="reference clip to clone (WAV/FLAC/OGG)")
    parser.add_argument("--prompt-text", help="what is said in the reference clip")
    parser.add_argument("--seed", type=int, help="explicit seed (-1: unseeded)")
    parser.add_argument("--speed", type=float, default=REQUEST_OPTION_DEFAULTS["speed"])
    parser.add_argument("--instruct", help="style instruction (engines that take one)")
    parser.add_argument("--language")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="engine parameter (repeatable), e.g. noise_scale=0")
    parser.add_argument("--ttl", type=float, help="seconds the take may be served")
    parser.add_argument("--seed-policy", help="unseeded requests: pin, bypass, variants:N")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def request_options_given(args: argparse.Namespace) -> list[str]:
    """The request options set on the command line (for commands where they mean nothing)."""
    return [f"--{name.replace('_', '-')}" for name, default in REQUEST_OPTION_DEFAULTS.items()
            if getattr(args, name, default) != default]


def request_from(args: argparse.Namespace) -> SynthesisRequest:
    """Build a request from parsed options."""
    params: dict[str, Any] = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise InvalidParameter(f"--param {item!r} must look like NAME=VALUE")
        params[name] = _number_or_text(value)
    reference = None
    if args.reference:
        try:
            with open(args.reference, "rb") as f:
                reference = f.read()
        except OSError as exc:
            raise InvalidParameter(f"cannot read reference clip: {exc}") from None
    return SynthesisRequest(
        text=args.text, voice=args.voice, reference_audio=reference,
        prompt_text=args.prompt_text, language=args.language, instruct=args.instruct,
        seed=args.seed, speed=args.speed, params=params, ttl=args.ttl,
        seed_policy=args.seed_policy,
    )


def _number_or_text(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def print_json(data: Any) -> None:
    """Write one JSON document to stdout."""
    json.dump(data, sys.stdout, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def warn(message: str) -> None:
    """A warning for people, on stderr (stdout stays the result)."""
    print(f"voxcache: warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def read_only_db(path: Path) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to one of the cache's SQLite tables, or None if it does not
    exist: a command that only reads must not create files in the cache folder."""
    if not path.exists():
        yield None
        return
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    try:
        yield db
    finally:
        db.close()
