"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config import Settings, load_settings
from ..errors import InvalidParameter
from ..request import SynthesisRequest


def settings_from(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Settings with the global command-line options (and a command's own) applied."""
    return load_settings(args.config, cache_dir=args.cache_dir, engine=args.engine, **overrides)


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """Options that describe a synthesis request (synth, explain)."""
    parser.add_argument("text", help="text to speak")
    parser.add_argument("--voice", help="voice name")
    parser.add_argument("--reference", help="reference clip to clone (WAV/FLAC/OGG)")
    parser.add_argument("--prompt-text", help="what is said in the reference clip")
    parser.add_argument("--seed", type=int, help="explicit seed (-1: unseeded)")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--instruct", help="style instruction (engines that take one)")
    parser.add_argument("--language")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="engine parameter (repeatable), e.g. noise_scale=0")
    parser.add_argument("--ttl", type=float, help="seconds the take may be served")
    parser.add_argument("--seed-policy", help="unseeded requests: pin, bypass, variants:N")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


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
