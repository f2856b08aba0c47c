"""``voxcache pack``: keygen, export, import, manifest and pull of signed voice packs.

A pack moves stored entries between nodes as one file (docs/operating/edge.md): ``export`` on a
node that has them, ``import`` (or ``pull`` from a center, on a schedule) on one
that should. Import trusts only packs signed by a key named with ``--trust``.
Progress goes to stderr; stdout carries the result (one JSON document with --json).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InvalidParameter, VoxcacheError
from .common import FAILED, OK, print_json, settings_from, warn
from .progress import progress

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d`` → seconds."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write e.g. 90s, 15m, 1h")
    return float(match.group(1)) * _UNIT[match.group(2)]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``pack`` and its sub-commands."""
    pack = subparsers.add_parser("pack", help="signed voice packs: keygen, export, import, "
                                 "manifest, pull (docs/operating/edge.md)")
    commands = pack.add_subparsers(dest="pack_command", required=True)

    p = commands.add_parser("keygen", help="make an Ed25519 signing key: KEY (0600) and "
                            "KEY.pub")
    p.add_argument("-o", "--output", required=True, metavar="KEY")
    p.set_defaults(handler=keygen)

    p = commands.add_parser("export", help="write selected entries into one signed pack")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--sign", required=True, metavar="KEY", help="private key to sign with")
    p.add_argument("--delta", metavar="MANIFEST", help="leave out every key this node "
                   "manifest (`voxcache pack manifest` on the receiver) already lists")
    _selection_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON summary")
    p.set_defaults(handler=export)

    p = commands.add_parser("import", help="verify a pack and store what it holds")
    p.add_argument("file", metavar="FILE")
    _trust_options(p)
    p.set_defaults(handler=import_)

    p = commands.add_parser("manifest", help="what this node holds (for `export --delta`)")
    p.add_argument("-o", "--output", metavar="FILE", help="write it here (default: stdout)")
    _selection_options(p)
    p.set_defaults(handler=manifest)

    p = commands.add_parser("pull", help="fetch and import a center's pack (optionally "
                            "on a schedule)")
    p.add_argument("url", metavar="URL", help="the center, e.g. http://center:8000")
    p.add_argument("--every", type=duration, metavar="DURATION",
                   help="pull again after this long, until interrupted (e.g. 1h)")
    p.add_argument("--api-key-file", metavar="FILE", help="the center's [admin] key, read "
                   "from this file (or $VOXCACHE_PACKS_API_KEY)")
    _selection_options(p)
    _trust_options(p)
    p.set_defaults(handler=pull)


def _selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", action="append", default=[], help="only this voice "
                   "(repeatable; as `voxcache ls` shows it)")
    p.add_argument("--tenant", help="only this tenant's entries")
    p.add_argument("--revision", help="only takes of this model revision")
    p.add_argument("--top", type=int, metavar="N", help="only the N most-hit entries")
    p.add_argument("--newer-than", type=duration, metavar="AGE", help="created within AGE")
    p.add_argument("--older-than", type=duration, metavar="AGE", help="created before AGE ago")


def _trust_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust", action="append", default=[], metavar="KEY.pub", required=True,
                   help="a public key whose signature this node accepts (repeatable)")
    p.add_argument("--pin", action="store_true", help="pin every imported entry (entries "
                   "the pack marks pinned are pinned anyway)")
    p.add_argument("--json", action="store_true", help="print one JSON summary")


def _selection(args: argparse.Namespace) -> Any:
    from ..packs.select import Selection

    if args.top is not None and args.top < 1:
        raise InvalidParameter("--top must be at least 1")
    return Selection(tuple(args.voice), args.tenant, args.revision, args.top,
                     args.newer_than, args.older_than)


def keygen(args: argparse.Namespace) -> int:
    """Write KEY and KEY.pub; print the key id."""
    from ..packs.signing import generate

    key_id = generate(args.output)
    print(f"wrote {args.output} (private, keep it secret) and {args.output}.pub "
          f"(give it to the nodes that import your packs); key id {key_id}")
    return OK


def export(args: argparse.Namespace) -> int:
    """Select, verify, sign and write; the file appears only once complete."""
    from .. import identity
    from ..packs.exporter import export_pack
    from ..packs.manifest import digest, keys_of
    from ..packs.signing import load_signing_key
    from ..runtime import open_cache

    key = load_signing_key(args.sign)
    settings = settings_from(args)
    exclude: set[str] = set()
    base = None
    if args.delta:
        data = _read(args.delta)
        exclude = keys_of(data)
        base = {"digest": digest(data), "entries": len(exclude)}
    cache = open_cache(settings, settled=True)
    target = Path(args.output)
    temp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        record = identity.read_record(cache.root)
        with progress(as_json=args.json, bytes_=True) as bars:
            written = bars.task("exporting")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                exported = export_pack(
                    cache, out, _selection(args), key, exclude=exclude, base=base,
                    identity=None if record is None else record["identity"],
                    progress=lambda _n, size: written.update(completed=size))
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
        cache.close()
    summary = {**exported.describe(), "file": str(target), "delta": base}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {target}: {exported.entries} entries, {exported.bytes:,} bytes, signed by "
              f"key {exported.key_id}" + (f" (delta: {len(exclude)} keys left out as already "
                                          "held)" if base else ""))
        for key_name, why in exported.left_out.items():
            warn(f"left out {key_name[:12]}: {why}")
    return OK


def import_(args: argparse.Namespace) -> int:
    """Verify and import one pack file; exit 1 unless every entry is now here."""
    from ..packs.importer import import_pack

    trusted = _trusted(args.trust)
    cache = _batch_cache(settings_from(args))
    try:
        with _opened(args.file) as stream, _entry_progress(args.json) as on_entries:
            report = import_pack(cache, stream, trusted, pin=args.pin, progress=on_entries)
    finally:
        cache.close()
    return _report(report.describe(), args.json)


def manifest(args: argparse.Namespace) -> int:
    """Print (or write) this node's manifest: keys, kinds, sizes, tenants (from the index)."""
    from ..packs.exporter import select_rows
    from ..packs.manifest import node_manifest
    from ..runtime import open_cache

    cache = open_cache(settings_from(args), settled=True)
    try:
        rows = select_rows(cache, _selection(args))
    finally:
        cache.close()
    data = node_manifest({"key": r.key, "kind": r.kind, "size": r.size, "tenant": r.tenant}
                         for r in rows)
    if args.output:
        Path(args.output).write_bytes(data + b"\n")
        print(f"wrote {args.output}: {len(rows)} entries")
    else:
        sys.stdout.buffer.write(data + b"\n")
    return OK


def pull(args: argparse.Namespace) -> int:
    """One round, or one every ``--every`` until interrupted (a failed round is reported and
    the next one tries again: a partial download resumes)."""
    from ..packs.pull import Source, pull_once

    trusted = _trusted(args.trust)
    key = os.environ.get("VOXCACHE_PACKS_API_KEY") or (
        _read(args.api_key_file).decode().strip() if args.api_key_file else None)
    source = Source(args.url.rstrip("/"), key, _selection(args))
    settings = settings_from(args)
    if args.every:  # a scheduled pull is stopped the way services are: SIGTERM ends it cleanly
        signal.signal(signal.SIGTERM, _interrupted)
    while True:
        cache = _batch_cache(settings)
        started = time.monotonic()
        try:
            with _byte_progress(args.json) as on_bytes, \
                    _entry_progress(args.json) as on_entries:
                summary = pull_once(cache, source, trusted, pin=args.pin, on_bytes=on_bytes,
                                    on_entries=on_entries)
            code = _report(summary, args.json)
            sys.stdout.flush()  # each round's line now, not when a scheduled pull ends
        except VoxcacheError as exc:
            if not args.every:
                raise
            warn(f"pull failed: {exc}; trying again in {args.every:g} s")
            code = FAILED
        finally:
            cache.close()
        if not args.every:
            return code
        time.sleep(max(0.0, args.every - (time.monotonic() - started)))


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the round in progress closes its cache and the command exits 130.
    (SIGINT alone is not enough: a job started in the background inherits it ignored.)"""
    raise KeyboardInterrupt


def _batch_cache(settings: Any) -> Any:
    """The cache folder for an import: its disk caps as configured, no memory tier (a batch
    job's memory would only hold what it wrote, and on a small device it is the budget the
    server needs)."""
    from ..cache import Cache

    config = dataclasses.replace(settings.cache_config(), memory_budgets={},
                                 memory_default_budget=0)
    return Cache(settings.cache_dir, config)


def _report(summary: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print_json(summary)
    else:
        print(f"pack {summary['digest'][:12]} signed by {summary['signed_by']}: imported "
              f"{summary['imported']}, already here {summary['skipped']}, kept (another take "
              f"here) {summary['kept']}, expired {summary['expired']}, purged here "
              f"{len(summary['purged'])}, refused {len(summary['refused'])}, missing "
              f"{len(summary['missing'])}, pinned {summary['pinned']}"
              + (f", evicted at once by this cache's caps {summary['evicted']}"
                 if summary["evicted"] else "")
              + (f"; removed {len(summary['removed'])} takes the publisher purged"
                 if summary["removed"] else ""))
        for name in summary["missing"]:
            print(f"  missing {name[:12]}: the pack does not carry it whole")
        for name, why in summary["refused"].items():
            print(f"  refused {name}: {why}")
        for name, why in summary["not_stored"].items():
            print(f"  not stored {name[:12]}: {why}")
        if summary["truncated"]:
            print(f"  the pack ends early: {summary['truncated']}")
    return OK if summary["complete"] else FAILED


def _trusted(paths: list[str]) -> list[Any]:
    from ..packs.signing import load_public_key

    return [load_public_key(path) for path in paths]


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidParameter(f"cannot read {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _opened(path: str) -> Iterator[BinaryIO]:
    """A pack file opened for reading, with a clear error when it cannot be."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InvalidParameter(f"cannot read pack {path}: {exc.strerror or exc}") from None
    with stream:
        yield stream


@contextlib.contextmanager
def _entry_progress(quiet: bool) -> Iterator[Callable[[int, int, int, int], None]]:
    """A bar over a pack's entries (``cli.progress``: on a terminal, never with --json)."""
    with progress(as_json=quiet) as bars:
        entries = bars.task("importing")
        yield lambda done, total, _bytes, _total_bytes: entries.report(done, total)


@contextlib.contextmanager
def _byte_progress(quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A download bar in bytes (``cli.progress``: on a terminal, never with --json)."""
    with progress(as_json=quiet, bytes_=True) as bars:
        downloaded = bars.task("downloading")
        yield lambda done, total: downloaded.report(done, total or None)
